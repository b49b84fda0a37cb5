"""Exports for tests/test_export_tasks.py, run on tests/worker_pool.py's workers so that they use both cores of the
test machine.

An ONNX export is single-threaded Python (torch.export tracing, decompositions, the onnxscript optimizer: ~35 s for
the 18-layer pose case, 5-9 s for the others), so two workers finish the module's ten exports in about the time of
the longest chain instead of their sum. `export_model` runs in the worker exactly as it would in the test process
(verification against the eager model included); the tests check the written folders in their own process.

A job is `(source, name, rope_dtype, format)`: source `"e2e"` (an `*_e2e` fixture's model at its input size) or
`"case"` (a model-case fixture, `rope_dtype` `"bfloat16"` or `"float32"`).
"""

from pathlib import Path

from official_cases import MODEL_CASES, e2e_case, load_case


def case_model(case, rope_dtype="bfloat16"):
    """(meta, reference tensors, eval model at the case's input size, {our output field: fixture tensor name})."""
    import sapiens2_hf

    meta, ref, weights = load_case(case)
    task = None if case.startswith("pretrain") else case
    size = [meta["input"]["height"], meta["input"]["width"]]
    model = sapiens2_hf.model_class_for_task(task).from_pretrained(weights, image_size=size, rope_dtype=rope_dtype)
    fields = dict(MODEL_CASES["pretrain" if task is None else case][1])
    return meta, ref, model.eval(), fields


def job_model(job):
    source, name, rope_dtype, _ = job
    return e2e_case(name)[3] if source == "e2e" else case_model(name, rope_dtype)[2]


def run_export(job, out_dir):
    """Worker side (see tests/worker_pool.py): builds the job's model and exports it to `out_dir`."""
    from sapiens2_hf.export import export_model

    return export_model(job_model(job), Path(out_dir), format=job[3])
