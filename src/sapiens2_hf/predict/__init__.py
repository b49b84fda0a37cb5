"""The prediction driver (layer 2) that `sapiens2-hf <task>` and the web app both run on: typed options and their
checks (`options`), the runs over images and videos (`run`, `video`), the writers (`outputs`). The face imports nothing.
"""
