"""Small helpers shared by several layer-1 and higher packages (layer 1; imports nothing of sapiens2_hf).

- `sapiens2_hf.utils.atomic_io`: atomic file writes and staged folder writes.
- `sapiens2_hf.utils.extras`: `require`, the one import of a package from an extra (train, video, export).
"""
