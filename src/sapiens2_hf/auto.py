"""Auto classes for the tasks transformers has no Auto class for: albedo, and any task registered with
`sapiens2_hf.register_task` whose registry entry says `auto_class="AutoModel"`.

transformers has no public way to define a new Auto class (`AutoModel.register` adds to an existing one), so this
module, and only it, builds on the private `_BaseAutoModelClass` / `_LazyAutoMapping` (stable since 4.x). It is never
shipped: repositories reach these classes through `AutoModel` and their `auto_map`, so a change in these internals
can break `AutoModelForAlbedoEstimation` for installed users, never a published repository.
"""

from collections import OrderedDict

from transformers.models.auto.auto_factory import _BaseAutoModelClass, _LazyAutoMapping


def new_auto_class(name: str, what: str) -> type:
    """A new, empty Auto class `name` (defined in this module), whose `from_pretrained(folder)` builds the `what`
    model a config.json describes once a model class is registered with it (`.register(config_class, model_class)`)."""
    return type(name, (_BaseAutoModelClass,), {
        "__doc__": f"`{name}.from_pretrained(folder)` builds the {what} model a config.json describes.",
        "__module__": __name__,
        "_model_mapping": _LazyAutoMapping(OrderedDict(), OrderedDict()),
    })


AutoModelForAlbedoEstimation = new_auto_class("AutoModelForAlbedoEstimation", "albedo")


def own_auto_class(name: str, what: str) -> type:
    """The Auto class `name` of this module, made (`new_auto_class`) on first use for a registered task."""
    if name not in globals():
        globals()[name] = new_auto_class(name, what)
    return globals()[name]


def drop_auto_class(name: str) -> None:
    """Removes an Auto class `own_auto_class` made (`sapiens2_hf.unregister_task`)."""
    globals().pop(name, None)
