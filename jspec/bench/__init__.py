"""`jspec bench`: methods x datasets, MAT / tok/s / speedup vs vanilla measured in the same run, tables and plots."""
