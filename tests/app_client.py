"""A `gradio_client.Client` whose calls fail after a time limit instead of waiting for ever (a server that died or a
port taken by another run would otherwise hang the suite in `Client.predict`)."""

from gradio_client import Client

PREDICT_TIMEOUT_S = 300


class TimedClient(Client):
    def predict(self, *args, api_name=None, **kwargs):
        return self.submit(*args, api_name=api_name, **kwargs).result(timeout=PREDICT_TIMEOUT_S)
