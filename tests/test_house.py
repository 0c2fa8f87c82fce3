"""The house rules of docs/architecture.md#house-rules, as tests, so they hold without anyone holding them by hand.

Covers: no module of ``hami_web`` over 500 lines; no function of ``hami_web`` over complexity 15 (ruff's C901 with
the limit set in pyproject.toml); every module named in its package's row of docs/architecture.md#modules, and each
top-level package importing directly only what that row's "may import" cell lists (the import graph read with
grimp, which import-linter is built on); ``.importlinter``'s contracts forbidding at least what the cells do.
A failure names the module and what to do.
"""

from __future__ import annotations

import configparser
import re
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "hami_web"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
MAX_MODULE_LINES = 500
MAX_COMPLEXITY = 15
TICKED = re.compile(r"`([^`]+)`")


def test_no_module_is_over_500_lines() -> None:
    """A module past 500 lines is split by what its parts are about (docs/architecture.md#house-rules)."""
    too_long = {str(path.relative_to(ROOT)): lines for path in sorted(PACKAGE.rglob("*.py"))
                if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    listed = ", ".join(f"{path} ({lines})" for path, lines in too_long.items())
    assert not too_long, f"modules over {MAX_MODULE_LINES} lines (split them by concern): {listed}"


def test_the_complexity_limit_is_configured_for_ruff() -> None:
    """`ruff check .` (tests/test_static.py) holds the limit too, and editors show it: the configuration says 15."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["ruff"]["lint"]
    assert "C90" in config["select"] or "C901" in config["select"]
    assert config["mccabe"]["max-complexity"] == MAX_COMPLEXITY


def test_no_function_is_over_complexity_15() -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--select", "C901", "--config",
         f"lint.mccabe.max-complexity={MAX_COMPLEXITY}", "--output-format", "concise", "hami_web"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    report = completed.stdout.strip() or completed.stderr.strip()
    assert completed.returncode == 0, (
        f"functions over complexity {MAX_COMPLEXITY} (move a part with a name of its own out):\n{report}")


@dataclass(frozen=True)
class Row:
    """One row of the modules table: the top-level module it belongs to, the names it mentions, its cell."""

    package: str
    names: frozenset[str]
    may_import: tuple[str, ...] | None  # None: an empty cell (the package's own row says)


def table_rows(page: Path = ARCHITECTURE) -> list[Row]:
    """The rows of the modules table of ``page`` (a Markdown table whose header starts ``| module |``)."""
    rows: list[Row] = []
    inside = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("| module |"):
            inside = True
            continue
        if not inside or line.startswith("|---"):
            continue
        if not line.startswith("|"):
            if rows:
                break
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        first = TICKED.findall(cells[0])
        if not first:
            continue
        path = first[0].removeprefix("hami_web/")
        package = path.split("/")[0].removesuffix(".py")
        names = frozenset(Path(token.rstrip("/")).name.removesuffix(".py")
                          for token in TICKED.findall(line) if token.rstrip("/"))
        cell = cells[-1] if len(cells) >= 3 else ""
        rows.append(Row(package, names, tuple(TICKED.findall(cell)) if cell else None))
    return rows


def test_the_table_parser_reads_names_and_cells(tmp_path: Path) -> None:
    page = tmp_path / "table.txt"
    page.write_text("| module | what | may import |\n|---|---|---|\n"
                    "| `hami_web/ops/` | `render.py` and `snapshot.py` | `core`, `state.nodes` (readers) |\n"
                    "| `core/fit.py` | fit | |\n| `hami_web/kube/` | client | nothing of ours |\n\nafter\n",
                    encoding="utf-8")
    assert table_rows(page) == [Row("ops", frozenset({"ops", "render", "snapshot", "core", "state.nodes"}),
                                    ("core", "state.nodes")),
                                Row("core", frozenset({"fit"}), None),
                                Row("kube", frozenset({"kube"}), ())]


def _modules() -> list[tuple[str, str]]:
    """(top-level module, name as the table names it) for every module of the package but the top __init__."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).parts
        if parts == ("__init__.py",):
            continue
        name = parts[-2] if parts[-1] == "__init__.py" else parts[-1].removesuffix(".py")
        found.append((parts[0].removesuffix(".py"), name))
    return found


def test_every_module_is_named_in_its_packages_rows() -> None:
    rows = table_rows()
    named: dict[str, set[str]] = {}
    for row in rows:
        named.setdefault(row.package, set()).update(row.names)
    missing = [f"hami_web/{package}: {name}" for package, name in _modules() if name not in named.get(package, set())]
    assert not missing, ("modules not named in their package's row of docs/architecture.md#modules "
                         "(add what each does): " + ", ".join(missing))


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("hami_web", cache_dir=None)


def _within(module: str, name: str) -> bool:
    return module == name or module.startswith(name + ".")


def test_every_package_imports_only_what_its_cell_lists(graph: grimp.ImportGraph) -> None:
    cells = {row.package: row.may_import for row in table_rows() if row.may_import is not None}
    tops = sorted({module.split(".")[1] for module in graph.modules if module.count(".") >= 1})
    assert not (unplaced := [top for top in tops if top not in cells]), (
        f"top-level modules without a 'may import' cell in docs/architecture.md#modules: {unplaced}")
    problems = []
    for top in tops:
        own = f"hami_web.{top}"
        allowed = [f"hami_web.{token}" for token in cells[top]]
        for module in sorted(module for module in graph.modules if _within(module, own)):
            for imported in sorted(graph.find_modules_directly_imported_by(module)):
                if (imported.startswith("hami_web.") and not _within(imported, own)
                        and not any(_within(imported, name) for name in allowed)):
                    problems.append(f"{module} imports {imported}")
    assert not problems, ("imports the 'may import' cells of docs/architecture.md#modules do not allow (move the "
                          "shared piece down a layer, or change the table and .importlinter together):\n"
                          + "\n".join(problems))


def test_every_cell_names_modules_that_exist(graph: grimp.ImportGraph) -> None:
    """A cell token of ours that names nothing (a typo, a module since moved) would allow nothing and say wrong."""
    ours = {module.split(".", 1)[1] for module in graph.modules if "." in module}
    stale = [f"{row.package}: {token}" for row in table_rows() for token in row.may_import or ()
             if token not in ours and (token.split(".")[0] in ours or "." not in token)]
    assert not stale, f"'may import' cells naming no module of hami_web: {stale}"


def _contracts(path: Path = ROOT / ".importlinter") -> tuple[list[list[str]], dict[str, set[str]]]:
    """The layers (top first, each a list of sibling packages) and, per source package, what forbidden contracts
    forbid it, from ``.importlinter`` as import-linter reads it."""
    parser = configparser.ConfigParser()
    parser.read(path, encoding="utf-8")
    layers: list[list[str]] = []
    forbidden: dict[str, set[str]] = {}
    for section in parser.sections():
        contract = parser[section]
        kind = contract.get("type")
        if kind == "layers":
            layers = [[name.strip() for name in line.split("|")] for line in contract["layers"].split("\n")
                      if line.strip()]
        elif kind == "forbidden":
            for source in contract["source_modules"].split():
                forbidden.setdefault(source.removeprefix("hami_web."), set()).update(
                    name.removeprefix("hami_web.") for name in contract["forbidden_modules"].split()
                    if name.startswith("hami_web."))
    return layers, forbidden


def _forbidden_by_layers(layers: list[list[str]], package: str) -> set[str]:
    """What the layers contract forbids ``package``: every layer above its own and its siblings."""
    for depth, layer in enumerate(layers):
        if package in layer:
            return {name for above in layers[:depth] for name in above} | (set(layer) - {package})
    return set()


def test_importlinter_forbids_all_that_the_cells_forbid(graph: grimp.ImportGraph) -> None:
    """The contracts are as tight as the table (docs/architecture.md#modules): every module of ours that a package's
    cell does not allow is forbidden to it by the layers contract or a forbidden contract, so ``lint-imports`` run
    alone (as an editor or a pre-commit hook runs it) says what the table says."""
    layers, forbidden = _contracts()
    cells = {row.package: row.may_import for row in table_rows() if row.may_import is not None}
    leaves = sorted(module.split(".", 1)[1] for module in graph.modules
                    if "." in module and not graph.find_children(module))
    loose = []
    for package, cell in cells.items():
        barred = _forbidden_by_layers(layers, package) | forbidden.get(package, set())
        for module in leaves:
            if _within(module, package) or any(_within(module, token) for token in cell):
                continue
            if not any(_within(module, name) for name in barred):
                loose.append(f"{package} may import {module} by .importlinter, not by its cell")
    assert not loose, ("contracts looser than docs/architecture.md#modules (add the module to the package's "
                       "forbidden contract in .importlinter):\n" + "\n".join(loose))
