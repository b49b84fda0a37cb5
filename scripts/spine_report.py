"""Prints the figures issue 29 ("one spine") asks to compare before and after: lines per package of src/sapiens2_hf,
the 15 longest functions, the comparisons against task names outside modeling/, and the import cycles.

    python scripts/spine_report.py [SRC]        # SRC defaults to this checkout's src/sapiens2_hf

A task-name comparison is an `==`/`!=`/`in` comparison, a `match` case or a dict key whose operand is one of the six
task names as a string literal (`task == "seg"`, `{"pose": ...}`, `args.task in ("normal", "pointmap")`).
"""

from __future__ import annotations

import ast
import sys
from collections import Counter
from pathlib import Path

TASK_NAMES = {"pose", "seg", "normal", "pointmap", "albedo", "matting"}


def _is_task_literal(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant) and node.value in TASK_NAMES:
        return True
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(isinstance(item, ast.Constant) and item.value in TASK_NAMES for item in node.elts)
    return False


def task_name_comparisons(tree: ast.AST) -> int:
    count = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            count += any(_is_task_literal(operand) for operand in [node.left, *node.comparators])
        elif isinstance(node, ast.Dict):
            count += sum(1 for key in node.keys if key is not None and _is_task_literal(key))
        elif isinstance(node, ast.match_case):
            count += _is_task_literal(getattr(node.pattern, "value", None) or ast.Pass())
    return count


def main(root: Path) -> None:
    lines_per_package: Counter = Counter()
    comparisons: Counter = Counter()
    functions = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        package = relative.parts[0] if len(relative.parts) > 1 else relative.name
        text = path.read_text(encoding="utf-8")
        lines_per_package[package] += len(text.splitlines())
        tree = ast.parse(text)
        if package != "modeling":
            comparisons[package] += task_name_comparisons(tree)
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                functions.append((node.end_lineno - node.lineno + 1, f"{relative}:{node.lineno} {node.name}"))
    print(f"lines in {root}: {sum(lines_per_package.values())}")
    for package, lines in sorted(lines_per_package.items(), key=lambda item: -item[1]):
        print(f"  {package:<24} {lines:6d}")
    print(f"task-name comparisons outside modeling/: {sum(comparisons.values())}")
    for package, count in sorted(comparisons.items(), key=lambda item: -item[1]):
        if count:
            print(f"  {package:<24} {count:6d}")
    print("15 longest functions:")
    for length, where in sorted(functions, reverse=True)[:15]:
        print(f"  {length:4d}  {where}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "src" / "sapiens2_hf")
