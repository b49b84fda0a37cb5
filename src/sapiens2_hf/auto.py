"""Auto class for the albedo task, which transformers has no Auto class for."""

from collections import OrderedDict

from transformers.models.auto.auto_factory import _BaseAutoModelClass, _LazyAutoMapping


class AutoModelForAlbedoEstimation(_BaseAutoModelClass):
    """`AutoModelForAlbedoEstimation.from_pretrained(folder)` builds the albedo model a config.json describes."""

    _model_mapping = _LazyAutoMapping(OrderedDict(), OrderedDict())
