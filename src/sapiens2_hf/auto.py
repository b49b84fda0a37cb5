"""Auto class for the albedo task, which transformers has no Auto class for.

transformers offers no public way to define a new Auto class: `AutoModel.register` only adds a config/model pair to an
existing one, and every `AutoModelFor*` is built on the private `_BaseAutoModelClass` / `_LazyAutoMapping` (the same two
names since transformers 4.x). So this module, and only it, uses them. It is not Hub-shippable and never shipped:
repositories reach the albedo class through `AutoModel` and their `auto_map` (see `sapiens2_hf.hub`), so a change in
these internals can break `sapiens2_hf.AutoModelForAlbedoEstimation` for installed users, never a published repository.
"""

from collections import OrderedDict

from transformers.models.auto.auto_factory import _BaseAutoModelClass, _LazyAutoMapping


class AutoModelForAlbedoEstimation(_BaseAutoModelClass):
    """`AutoModelForAlbedoEstimation.from_pretrained(folder)` builds the albedo model a config.json describes."""

    _model_mapping = _LazyAutoMapping(OrderedDict(), OrderedDict())
