"""Every notebook in colab/ runs top to bottom, headless and without Jupyter.

The code cells are executed in order in one namespace, like a kernel would; shell and magic lines (`!pip ...`,
`%cd ...`) are skipped, since the test environment is already installed. JSPEC_NOTEBOOK_TINY=1 tells the notebooks to
keep every generation to 8 new tokens and every training run to a few steps. Each runs in its own temporary folder,
where the training notebook writes its data and drafters.
"""

import json
import pathlib

import pytest

NOTEBOOKS = sorted((pathlib.Path(__file__).resolve().parents[1] / "colab").glob("*.ipynb"))


def _source(cell: dict) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def code_cells(path: pathlib.Path) -> list[str]:
    """The notebook's code cells as Python, after checking it is a clean nbformat-4 notebook."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    assert nb.get("nbformat") == 4, f"{path.name}: not an nbformat 4 notebook"
    assert isinstance(nb.get("cells"), list) and nb["cells"], f"{path.name}: no cells"
    cells = []
    for i, cell in enumerate(nb["cells"]):
        assert cell.get("cell_type") in ("code", "markdown", "raw"), f"{path.name} cell {i}: bad cell_type"
        assert isinstance(cell.get("metadata"), dict), f"{path.name} cell {i}: no metadata"
        if cell["cell_type"] == "code":
            assert cell.get("outputs") == [], f"{path.name} cell {i}: commit notebooks without outputs"
            lines = _source(cell).splitlines()
            cells.append("\n".join(line for line in lines if not line.lstrip().startswith(("!", "%"))))
    assert cells, f"{path.name}: no code cells"
    return cells


def test_there_are_notebooks():
    assert NOTEBOOKS, "no notebooks in colab/"


@pytest.mark.real_model
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs(path, smollm2_gguf, monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("JSPEC_NOTEBOOK_TINY", "1")
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "__main__"}
    for i, source in enumerate(code_cells(path)):
        exec(compile(source, f"<{path.name} code cell {i}>", "exec"), namespace)
    printed = capsys.readouterr().out
    assert "tok/s" in printed
    if path.name == "train_drafter.ipynb":  # decoding with the drafters it trained stays lossless
        table = namespace["table"]
        assert set(table) == {"vanilla", "dflash", "domino"} and all(row["identical"] for row in table.values())
