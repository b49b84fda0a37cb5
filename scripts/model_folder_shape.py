"""Print the shape of the model folder: the figures the model-folder issue closes with.

    python scripts/model_folder_shape.py [src]

Lines of `modeling/`, of the image processor class, the parameters of `preprocess` and of the pose post-processing,
the lines of each pipeline class, the 15 longest functions of `src/` and how many are over 50 lines, and the files
over 1,000 lines. Lines are physical lines (docstrings included); a function's are `end_lineno - lineno + 1`.
"""

import ast
import sys
from pathlib import Path


def _parameters(function: ast.FunctionDef) -> int:
    arguments = function.args
    named = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
    return len([a for a in named if a.arg not in ("self", "cls")]) + bool(arguments.vararg) + bool(arguments.kwarg)


def main(root: Path) -> None:
    modeling = sorted((root / "sapiens2_hf" / "modeling").glob("*.py"))
    print(f"modeling/: {sum(len(p.read_text().splitlines()) for p in modeling)} lines in {len(modeling)} files")
    functions, big_files = [], []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text()
        if len(text.splitlines()) > 1000:
            big_files.append(f"{path.relative_to(root)} {len(text.splitlines())}")
        for node in ast.walk(ast.parse(text)):
            name = f"{path.relative_to(root)}:{getattr(node, 'name', '')}"
            size = getattr(node, "end_lineno", 0) - getattr(node, "lineno", 0) + 1
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                functions.append((size, name))
            if isinstance(node, ast.ClassDef) and path.parent.name == "modeling":
                if node.name.endswith("Pipeline") or node.name.endswith("ImageProcessor"):
                    print(f"class {node.name}: {size} lines")
                for item in node.body:
                    if isinstance(item, ast.FunctionDef) and (item.name == "preprocess" or "post_process_pose" in item.name):
                        print(f"  {node.name}.{item.name}: {_parameters(item)} parameters")
            if isinstance(node, ast.FunctionDef) and path.parent.name == "modeling" and node.col_offset == 0:
                if "pose" in node.name and "post_process" in node.name:
                    print(f"function {node.name}: {_parameters(node)} parameters")
    functions.sort(reverse=True)
    print(f"functions over 50 lines: {sum(size > 50 for size, _ in functions)}")
    print("longest 15: " + ", ".join(f"{name} {size}" for size, name in functions[:15]))
    print(f"files over 1,000 lines: {len(big_files)} {', '.join(big_files)}")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "src"))
