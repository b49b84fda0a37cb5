"""The run layer (layer 1): what every command that walks inputs runs on (predict on images and video, pose3d,
curate, the web app). A new capability is a task, stage or output on this layer, never a new loop beside it.

The face imports nothing; import the modules:

- `runs.inputs` (stdlib only): `IMAGE_SUFFIXES` / `VIDEO_SUFFIXES` (the one list), `collect_files(inputs, skip)`
  -> (images, videos) of files and folders, `image_files(folder)`, `is_dataset_folder(path)` (`save_to_disk`
  folders), `check_out_not_in_inputs(out, inputs, files, option)` (an output folder equal to an input folder or the
  folder of an input file is refused), `output_names(units, reserved)` (one injective output name per input).
- `runs.decode`: `decode_image(path | bytes | {"bytes", "path"} | PIL.Image, name=None)` -> (H, W, 3) uint8 RGB:
  the one decoder of files, on PIL; header pixel cap, `MAX_DECODED_BYTES`, `MAX_ASPECT_RATIO`, EXIF orientation,
  every mode, and `ImageDecodeError` (a `ValueError`, one line naming the file) for zero-byte, truncated and
  non-image files.
- `runs.shard`: `Shard(device="auto", feature=...)`: the one `accelerate.PartialState`; `.index`, `.count`,
  `.is_main`, `.split(units)` (contiguous share), `.owns(k)` (round robin), `.wait()`, `.device(requested)`;
  `world_size()`.
- `runs.resume`: `ResumeMarkers(out, kind, run=None)` (run: a composed command's name): `.is_done(name, fingerprint)`,
  `.mark_done(name, fingerprint, files)`, `.clear(name)`, `.path(name)`; `file_fingerprint(path)`;
  `STATE_FOLDER` (`.sapiens2-hf`).
- `runs.records`: `RunReport` (processed, skipped with reasons, finished, a command's own `notes`),
  `reason(error)`, `write_summary(record, path, inputs, run=NAME)` (`summary.json` merged across runs, and the
  run's own record under its name), `merge_summaries`, `part_path`.
- `runs.errors`: `is_expected_error(error)` (the user's input at fault: one line, exit code 2), `error_message`,
  `run_script(prog, main)` (the training scripts).
- The exclusive run lock: `sapiens2_hf.utils.run_lock.run_folder_lock(folder, enabled=shard.is_main)`; atomic
  outputs: `sapiens2_hf.utils.atomic_io`.
"""
