"""A `gradio_client.Client` whose calls fail after a time limit instead of waiting for ever (a server that died or a
port taken by another run would otherwise hang the suite in `Client.predict`; `Job.result(timeout=)` of the oldest
supported gradio_client does not time out, so the job is polled)."""

import time

from gradio_client import Client

PREDICT_TIMEOUT_S = 300


class TimedClient(Client):
    def predict(self, *args, api_name=None, **kwargs):
        job = self.submit(*args, api_name=api_name, **kwargs)
        deadline = time.monotonic() + PREDICT_TIMEOUT_S
        while not job.done():
            if time.monotonic() > deadline:
                job.cancel()
                raise TimeoutError(f"{api_name}: no answer from the app in {PREDICT_TIMEOUT_S} s")
            time.sleep(0.05)
        return job.result()
