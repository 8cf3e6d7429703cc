"""`python -m jspec.cli ...`, as the `jspec` script."""

import sys

from jspec.cli import main

sys.exit(main())
