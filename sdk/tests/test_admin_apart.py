"""ferry.admin stands apart from ferry.client (issue 39): the client never imports the admin
tools (users still reach ferry.client.Admin, looked up on first use), and the admin modules
call one another only through public names."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import ferry.admin
import ferry.client

ADMIN_DIR = Path(ferry.admin.__file__).parent
CLIENT_DIR = Path(ferry.client.__file__).parent


def test_importing_the_client_does_not_import_the_admin() -> None:
    code = (
        "import sys, ferry.client, ferry.client.aio\n"
        "assert not [m for m in sys.modules if m.startswith('ferry.admin')], sorted(sys.modules)\n"
        "from ferry.client import Admin, ControllerAdmin, PullResult\n"
        "from ferry.client.aio import Admin as AsyncAdmin\n"
        "import ferry.admin, ferry.admin.aio\n"
        "assert Admin is ferry.admin.Admin and AsyncAdmin is ferry.admin.aio.Admin\n"
        "assert ControllerAdmin is ferry.admin.ControllerAdmin\n"
        "assert PullResult is ferry.admin.PullResult\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def _imported_modules(tree: ast.AST) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
    return out


def test_no_client_module_imports_the_admin_at_import_time() -> None:
    for path in sorted(CLIENT_DIR.rglob("*.py")):
        imported = _imported_modules(ast.parse(path.read_text()))
        found = {m for m in imported if m == "ferry.admin" or m.startswith("ferry.admin.")}
        if found and path in (CLIENT_DIR / "__init__.py", CLIENT_DIR / "aio" / "__init__.py"):
            # these two name the admin for type checkers only, and lazily for users
            assert found <= {"ferry.admin", "ferry.admin.aio"}, (path, found)
            assert "if TYPE_CHECKING:\n    from ferry.admin" in path.read_text(), path
        else:
            assert not found, (path, found)


def _private_calls(tree: ast.AST) -> list[str]:
    """`x._name` where x is not self or cls: a reach into another object's insides."""
    out = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and not (isinstance(node.value, ast.Name) and node.value.id in {"self", "cls"})
        ):
            out.append(f"line {node.lineno}: .{node.attr}")
    return out


def test_admin_modules_reach_no_private_name_of_another_object() -> None:
    for path in sorted(ADMIN_DIR.rglob("*.py")):
        found = _private_calls(ast.parse(path.read_text()))
        assert not found, (path, found)


def test_no_admin_module_imports_a_private_name() -> None:
    for path in sorted(ADMIN_DIR.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ferry."):
                private = [a.name for a in node.names if a.name.startswith("_")]
                assert not private, (path, node.module, private)
