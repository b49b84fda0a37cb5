"""Parity figures: our models (bf16 and fp32 RoPE) and transformers' own classes against the official outputs.

Runs every model case of tests/fixtures/official through the public `from_pretrained` and prints max-abs and rel-L2
differences. transformers' classes get the same weights (saved by us, loaded by vanilla `from_pretrained`).

    python benchmarks/parity_report.py [--json out.json]
"""

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import sapiens2_hf  # noqa: E402
from official_cases import MODEL_CASES, compare, load_case  # noqa: E402

VANILLA = {
    "pretrain": transformers.Sapiens2Model,
    "pose": transformers.Sapiens2ForPoseEstimation,
    "seg": transformers.Sapiens2ForSemanticSegmentation,
    "normal": transformers.Sapiens2ForNormalEstimation,
    "pointmap": transformers.Sapiens2ForPointmapEstimation,
}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    rows = []
    for case, (class_name, fields) in MODEL_CASES.items():
        _, reference, weights = load_case(case)
        cls = getattr(sapiens2_hf, class_name)
        models = {
            "sapiens2_hf bf16 RoPE (default)": cls.from_pretrained(weights),
            "sapiens2_hf fp32 RoPE": cls.from_pretrained(weights, rope_dtype="float32"),
        }
        if case in VANILLA:
            with tempfile.TemporaryDirectory() as folder:
                models["sapiens2_hf bf16 RoPE (default)"].save_pretrained(folder)
                models["transformers " + transformers.__version__] = VANILLA[case].from_pretrained(folder).eval()
        for label, model in models.items():
            with torch.no_grad():
                outputs = model(reference["pixel_values"])
            for ours, theirs in fields.items():
                for ref_name, ref_label in ((theirs, "official bf16"), (theirs + "_rope_fp32", "official fp32")):
                    stats = compare(outputs[ours], reference[ref_name])
                    rows.append({"case": case, "model": label, "output": ours, "reference": ref_label, **stats})
                    print(f"{case:9s} {label:34s} {ours:18s} vs {ref_label:13s} max_abs {stats['max_abs']:.2e} "
                          f"rel_l2 {stats['rel_l2']:.2e}")
    if args.json:
        Path(args.json).write_text(json.dumps({"torch": torch.__version__, "transformers": transformers.__version__, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
