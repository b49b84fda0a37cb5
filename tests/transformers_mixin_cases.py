"""Our model, backbone, config and image-processor classes under transformers' shared test mixins, the way a library
outside transformers tests its models: `ModelTesterMixin`, `BackboneTesterMixin`, `ConfigTester` and
`ImageProcessingTestMixin` (+ `PostProcessSemanticSegmentationTestMixin`) from the sdist of the installed
transformers, with a tester of our own that builds the configs and inputs they ask for.

Not collected by the repository's pytest (the name has no `test_` prefix): tests/transformers_suite.py runs this
file in a child pytest, with the sdist's tests/ folder importable as the package `transformers_tests`, and
tests/test_transformers_mixins.py checks the outcomes against the documented differences
(tests/transformers_suite_expected.py `MIXIN_EXPECTED_FAILURES`). The child keeps the mixins' imports and global
changes (random seeds, default devices, `sys.path`) out of the main test process.

`SAPIENS2_HF_MIXINS_TARGET` picks the classes:
- `sapiens2_hf` (default) and `control`: ours. The `Broken*` classes at the end are the control: a model whose
  forward drops `output_hidden_states` and a processor that ignores `size`; named mixin tests must fail on them
  (the `control` selection of tests/transformers_suite.py).
- `transformers`: transformers' own Sapiens2 classes under the same cases (a measurement of the cases themselves,
  benchmarks/transformers_suite_counts.py); our albedo model and the cases that check our contracts are skipped.

`PipelineTesterMixin` is left out: its tests need tiny checkpoints from the Hub and transformers' tests/pipelines/
files (not in the sdist), so offline every one of them skips; our pipelines have their own tests.

Configs are built the way transformers' own Sapiens2 model tester builds them (its sizes: 30x30 inputs, patch 2,
hidden 32, 2 layers, 4 heads, 2 register tokens, 4 labels, a head layout that gives every head class its modules),
without `task`: one config shared by every model class, as the mixins expect.
"""

import copy
import json
import os
import unittest

import torch
from torch import nn

from transformers_tests.test_backbone_common import BackboneTesterMixin
from transformers_tests.test_configuration_common import ConfigTester
from transformers_tests.test_image_processing_common import (
    ImageProcessingTester,
    ImageProcessingTestMixin,
    PostProcessSemanticSegmentationTestMixin,
)
from transformers_tests.test_modeling_common import ModelTesterMixin, floats_tensor

TARGET = os.environ.get("SAPIENS2_HF_MIXINS_TARGET", "sapiens2_hf")
OURS = TARGET in ("sapiens2_hf", "control")
if TARGET not in ("sapiens2_hf", "control", "transformers"):
    raise ValueError(f"SAPIENS2_HF_MIXINS_TARGET must be sapiens2_hf, control or transformers, not {TARGET!r}")

if OURS:
    import sapiens2_hf as library
    from sapiens2_hf.processing import Sapiens2HFImageProcessor

    PROCESSOR_CLASSES = {"torchvision": Sapiens2HFImageProcessor}
else:
    import transformers as library
    from transformers.models.auto.image_processing_auto import (
        IMAGE_PROCESSOR_MAPPING_NAMES,
        get_image_processor_class_from_name,
    )

    PROCESSOR_CLASSES = {
        backend: get_image_processor_class_from_name(name)
        for backend, name in IMAGE_PROCESSOR_MAPPING_NAMES["sapiens2"].items()
    }

Config = library.Sapiens2Config
HeadConfig = library.Sapiens2HeadConfig
Backbone = library.Sapiens2Backbone
BaseModel = library.Sapiens2Model
# The task classes, by the name both libraries give them (albedo is ours only).
TASK_CLASSES = {
    name: getattr(library, name)
    for name in ("Sapiens2ForPoseEstimation", "Sapiens2ForSemanticSegmentation", "Sapiens2ForNormalEstimation",
                 "Sapiens2ForPointmapEstimation", "Sapiens2ForImageMatting", "Sapiens2ForAlbedoEstimation")
    if hasattr(library, name)
}
NOT_OURS = "checks a sapiens2_hf contract; the transformers target measures the mixin cases only"


class Sapiens2ModelTester:
    """Configs and inputs for the model mixins.

    `prepare_config_and_inputs_for_common()` is what the mixins call: one config, shared by every model class,
    with pixel-shuffle upsampling so that every head class builds all its modules; `prepare_config_and_inputs()`
    gives the transposed-convolution variant. `head_norm_type` is only set for our albedo head (channel RMSNorm).
    """

    def __init__(self, parent, batch_size=13, image_size=30, patch_size=2, num_channels=3, hidden_size=32,
                 num_hidden_layers=2, num_attention_heads=4, intermediate_size=37, hidden_act="gelu",
                 num_register_tokens=2, num_labels=4, is_training=False, head_norm_type=None):
        self.parent = parent
        self.batch_size = batch_size
        self.image_size = image_size
        self.patch_size = patch_size
        self.num_channels = num_channels
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.intermediate_size = intermediate_size
        self.hidden_act = hidden_act
        self.num_register_tokens = num_register_tokens
        self.num_labels = num_labels
        self.is_training = is_training
        self.head_norm_type = head_norm_type
        self.grid_size = image_size // patch_size
        # CLS token, register tokens, then one token per patch
        self.seq_length = 1 + num_register_tokens + self.grid_size**2
        # masked patches for the tests that reload with `use_mask_token=True` (test_eager_matches_sdpa_inference)
        self.mask_length = self.grid_size**2
        self.num_masks = self.seq_length // 2

    def head_config(self, use_pixel_shuffle=None):
        fields = {
            "upsample_out_channels": [8, 4, 4, 4],
            "upsample_kernel_sizes": [4, 4, 4, 4],
            "conv_out_channels": [4, 4, 4],
            "conv_kernel_sizes": [1, 1, 1],
            "scale_conv_out_channels": [8, 4, 4],
            "scale_conv_kernel_sizes": [1, 1, 1],
            "scale_final_hidden_sizes": [8, 4],
            "use_pixel_shuffle": use_pixel_shuffle,
        }
        if self.head_norm_type is not None:
            fields["norm_type"] = self.head_norm_type
        return HeadConfig(**fields)

    def get_config(self, use_pixel_shuffle=None):
        return Config(
            image_size=self.image_size,
            patch_size=self.patch_size,
            num_channels=self.num_channels,
            hidden_size=self.hidden_size,
            num_hidden_layers=self.num_hidden_layers,
            num_attention_heads=self.num_attention_heads,
            intermediate_size=self.intermediate_size,
            hidden_act=self.hidden_act,
            num_register_tokens=self.num_register_tokens,
            out_indices=[0, 1],
            reshape_hidden_states=True,
            num_labels=self.num_labels,
            flip_pairs=[[1, 2], [3, 4]],
            head_config=self.head_config(use_pixel_shuffle),
        )

    def pixel_values(self, batch_size=None):
        shape = [batch_size or self.batch_size, self.num_channels, self.image_size, self.image_size]
        return floats_tensor(shape)

    def prepare_config_and_inputs(self):
        return self.get_config(), self.pixel_values()

    def prepare_config_and_inputs_for_common(self):
        return self.get_config(use_pixel_shuffle=True), {"pixel_values": self.pixel_values()}

    def decoded_size(self, head_config) -> int:
        """Side of a head's output for this tester's inputs: each transposed convolution (kernel 4, stride 2,
        padding 1) doubles the side; each pixel-shuffle block, a stride-1 convolution of kernel k and padding
        (k - 1) // 2 followed by a 2x shuffle, maps a side h to 2 * (h + 2 * ((k - 1) // 2) - k + 1)."""
        side = self.grid_size
        for kernel in head_config.upsample_kernel_sizes:
            if head_config.use_pixel_shuffle:
                side = (side + 2 * ((kernel - 1) // 2) - kernel + 1) * 2
            else:
                side *= 2
        return side


class Sapiens2ModelCases(ModelTesterMixin):
    """What our model test classes add to `ModelTesterMixin`: the checks of transformers' own Sapiens2 model tests
    that the mixin has no generic form of (shapes of each head's outputs, the backbone's feature maps), written for
    these classes, and the mixin settings that fit a vision model without token embeddings."""

    test_resize_embeddings = False
    tester_kwargs = {}

    def setUp(self):
        self.model_tester = Sapiens2ModelTester(self, **self.tester_kwargs)
        # deterministic transposed convolutions on CUDA (the heads' InstanceNorm amplifies their nondeterminism)
        self._cudnn_deterministic = torch.backends.cudnn.deterministic
        torch.backends.cudnn.deterministic = True

    def tearDown(self):
        torch.backends.cudnn.deterministic = self._cudnn_deterministic

    def test_model_get_set_embeddings(self):
        # The mixin's version expects token embeddings (nn.Embedding); ours are the patch embedding, a convolution.
        config, _ = self.model_tester.prepare_config_and_inputs_for_common()
        for model_class in self.all_model_classes:
            model = model_class(copy.deepcopy(config))
            self.assertIsInstance(model.get_input_embeddings(), nn.Conv2d)
            output_embeddings = model.get_output_embeddings()
            self.assertTrue(output_embeddings is None or isinstance(output_embeddings, nn.Linear))

    def test_batching_equivalence(self, atol=1e-4, rtol=1e-4):
        # The heads' InstanceNorm reduces over each sample's pixels: the reduction order, hence the last bits, can
        # change with the batch size on CPU (transformers' own Sapiens2 tests use the same tolerance).
        super().test_batching_equivalence(atol=atol, rtol=rtol)

    @unittest.skip(reason="Sapiens2 has no feed-forward chunking (`chunk_size_feed_forward` is not read)")
    def test_feed_forward_chunking(self):
        pass

    def _task_outputs(self, model_class, use_pixel_shuffle):
        config = self.model_tester.get_config(use_pixel_shuffle=use_pixel_shuffle)
        model = model_class(copy.deepcopy(config)).to(self.device).eval()
        with torch.no_grad():
            outputs = model(self.model_tester.pixel_values(batch_size=2).to(self.device))
        side = self.model_tester.decoded_size(config.head_config)
        return config, outputs, side

    @property
    def device(self):
        from transformers.testing_utils import torch_device

        return torch_device


class Sapiens2ModelTest(Sapiens2ModelCases, unittest.TestCase):
    all_model_classes = (
        BaseModel,
        Backbone,
        *(cls for name, cls in TASK_CLASSES.items() if name != "Sapiens2ForAlbedoEstimation"),
    )

    def test_config_is_shared_by_every_class(self):
        # The mixins build every class from one config: a class must not write into the config it is given.
        config, _ = self.model_tester.prepare_config_and_inputs_for_common()
        before = config.to_dict()
        for model_class in self.all_model_classes:
            model_class(config)
        self.assertEqual(config.to_dict(), before)

    def test_base_model_outputs(self):
        config, pixel_values = self.model_tester.prepare_config_and_inputs()
        model = BaseModel(config).to(self.device).eval()
        with torch.no_grad():
            outputs = model(pixel_values.to(self.device))
        batch, tokens, hidden = self.model_tester.batch_size, self.model_tester.seq_length, config.hidden_size
        self.assertEqual(tuple(outputs.last_hidden_state.shape), (batch, tokens, hidden))
        self.assertEqual(tuple(outputs.pooler_output.shape), (batch, hidden))

    def test_backbone_feature_maps(self):
        config, pixel_values = self.model_tester.prepare_config_and_inputs()
        config.out_features = ["stage1", "stage2"]
        model = Backbone(config).to(self.device).eval()
        with torch.no_grad():
            outputs = model(pixel_values.to(self.device))
        grid = self.model_tester.grid_size
        self.assertEqual(len(outputs.feature_maps), 2)
        for feature_map in outputs.feature_maps:
            self.assertEqual(tuple(feature_map.shape), (self.model_tester.batch_size, config.hidden_size, grid, grid))

    def test_pose_heatmaps(self):
        config, outputs, side = self._task_outputs(TASK_CLASSES["Sapiens2ForPoseEstimation"], None)
        self.assertEqual(tuple(outputs.heatmaps.shape), (2, config.num_labels, side, side))
        self.assertIsNone(outputs.loss)

    def test_segmentation_logits(self):
        config, outputs, side = self._task_outputs(TASK_CLASSES["Sapiens2ForSemanticSegmentation"], None)
        self.assertEqual(tuple(outputs.logits.shape), (2, config.num_labels, side, side))
        self.assertIsNone(outputs.loss)

    def test_normals(self):
        config, outputs, side = self._task_outputs(TASK_CLASSES["Sapiens2ForNormalEstimation"], True)
        self.assertEqual(tuple(outputs.normals.shape), (2, config.num_labels, side, side))
        self.assertIsNone(outputs.loss)

    def test_pointmaps_and_scales(self):
        config, outputs, side = self._task_outputs(TASK_CLASSES["Sapiens2ForPointmapEstimation"], True)
        self.assertEqual(tuple(outputs.pointmaps.shape), (2, config.num_labels, side, side))
        self.assertEqual(tuple(outputs.scales.shape), (2, 1))
        self.assertIsNone(outputs.loss)

    def test_matting_alphas_and_foregrounds(self):
        _, outputs, side = self._task_outputs(TASK_CLASSES["Sapiens2ForImageMatting"], True)
        self.assertEqual(tuple(outputs.alphas.shape), (2, 1, side, side))
        self.assertEqual(tuple(outputs.foregrounds.shape), (2, 3, side, side))
        for values in (outputs.alphas, outputs.foregrounds):  # sigmoid outputs
            self.assertGreaterEqual(values.min().item(), 0.0)
            self.assertLessEqual(values.max().item(), 1.0)
        self.assertIsNone(outputs.loss)

    @unittest.skipUnless(OURS, NOT_OURS)
    def test_labels_give_the_task_loss(self):
        # Deliberate difference: with labels, ours compute the official task losses (transformers raises
        # NotImplementedError for the normal, pointmap and matting heads, and uses plain cross-entropy for seg).
        generator = torch.Generator().manual_seed(0)
        batch = 2

        def uniform(*shape):
            return torch.rand(*shape, generator=generator)

        # class name -> (num_labels, pixel shuffle, side -> the forward's target arguments)
        cases = {
            "Sapiens2ForPoseEstimation": (4, None, lambda side: {
                "labels": uniform(batch, 4, side, side), "label_weights": torch.ones(batch, 4)}),
            # the official seg loss weighs the 29 official classes
            "Sapiens2ForSemanticSegmentation": (29, None, lambda side: {
                "labels": torch.randint(0, 29, (batch, side, side), generator=generator)}),
            "Sapiens2ForNormalEstimation": (3, True, lambda side: {
                "labels": nn.functional.normalize(uniform(batch, 3, side, side) - 0.5, dim=1)}),
            "Sapiens2ForPointmapEstimation": (3, True, lambda side: {
                "labels": uniform(batch, 3, side, side) + torch.tensor([0.0, 0.0, 1.0]).view(3, 1, 1),
                "target_scales": torch.ones(batch, 1),
                "intrinsics": torch.tensor([[side, 0.0, side / 2], [0.0, side, side / 2], [0.0, 0.0, 1.0]])
                .expand(batch, 3, 3)}),
            "Sapiens2ForImageMatting": (4, True, lambda side: {"labels": uniform(batch, 1, side, side)}),
        }
        for name, (num_labels, use_pixel_shuffle, make_targets) in cases.items():
            with self.subTest(name):
                config = self.model_tester.get_config(use_pixel_shuffle=use_pixel_shuffle)
                config.num_labels = num_labels
                model = TASK_CLASSES[name](config).to(self.device)
                side = self.model_tester.decoded_size(config.head_config)
                targets = {key: value.to(self.device) for key, value in make_targets(side).items()}
                outputs = model(self.model_tester.pixel_values(batch_size=batch).to(self.device), **targets)
                self.assertEqual(outputs.loss.ndim, 0)
                self.assertTrue(torch.isfinite(outputs.loss))
                outputs.loss.backward()


@unittest.skipUnless("Sapiens2ForAlbedoEstimation" in TASK_CLASSES, "transformers has no albedo model")
class Sapiens2AlbedoModelTest(Sapiens2ModelCases, unittest.TestCase):
    """Our albedo model (not in transformers): its head normalises with a channel RMSNorm, so it gets the same config
    with `head_config.norm_type="rms_norm"` (the class refuses the other heads' InstanceNorm)."""

    all_model_classes = tuple(cls for name, cls in TASK_CLASSES.items() if name == "Sapiens2ForAlbedoEstimation")
    tester_kwargs = {"head_norm_type": "rms_norm", "num_labels": 3}

    def test_albedos(self):
        config, outputs, side = self._task_outputs(self.all_model_classes[0], True)
        self.assertEqual(tuple(outputs.albedos.shape), (2, config.num_labels, side, side))
        self.assertIsNone(outputs.loss)


class Sapiens2BackboneTest(BackboneTesterMixin, unittest.TestCase):
    all_model_classes = (Backbone,)
    config_class = Config

    def setUp(self):
        self.model_tester = Sapiens2ModelTester(self)


class Sapiens2ConfigTest(unittest.TestCase):
    def setUp(self):
        self.model_tester = Sapiens2ModelTester(self)

    def test_common_with_the_transformers_tester_kwargs(self):
        # transformers' Sapiens2 tests run ConfigTester with hidden_size=32 and the default 16 heads (head dim 2).
        ConfigTester(self, config_class=Config, has_text_modality=False, hidden_size=32).run_common_tests()

    def test_common_with_rope_sized_heads(self):
        # The same checks with the model tester's 2 layers of 4 heads (head dim 8: the 2-D RoPE needs a multiple of 4).
        ConfigTester(self, config_class=Config, has_text_modality=False, **self.rope_sized).run_common_tests()

    def test_common_with_a_head_config(self):
        # The head layout as config.json holds it (ConfigTester compares the serialised value with the one passed),
        # which also runs the sub-config round trips (`create_and_test_config_from_and_save_pretrained_composite`).
        head_config = json.loads(self.model_tester.get_config(use_pixel_shuffle=True).to_json_string())["head_config"]
        ConfigTester(
            self, config_class=Config, has_text_modality=False, head_config=head_config, **self.rope_sized
        ).run_common_tests()

    rope_sized = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4}


class Sapiens2ImageProcessingTester(ImageProcessingTester):
    """Processor settings and inputs for the image-processing mixins. The mixins find the classes under test from the
    test file's folder name (a transformers model folder); here they are named (`PROCESSOR_CLASSES`)."""

    def __init__(self, parent):
        settings = {
            "size": {"height": 64, "width": 48},
            "do_resize": True,
            "do_normalize": True,
            "image_mean": [0.5, 0.5, 0.5],
            "image_std": [0.5, 0.5, 0.5],
            "num_labels": 4,
        }
        if OURS:
            settings["task"] = parent.task
        super().__init__(parent, batch_size=7, num_channels=3, min_resolution=30, max_resolution=400, **settings)

    def _get_image_processing_classes(self):
        return dict(self.parent.processor_classes)


class Sapiens2ImageProcessingCases(ImageProcessingTestMixin, PostProcessSemanticSegmentationTestMixin):
    """One test class per task: ours is one processor class whose `task` field picks the official geometry."""

    image_processor_tester_class = Sapiens2ImageProcessingTester
    processor_classes = PROCESSOR_CLASSES
    task = None

    def setUp(self):
        super().setUp()
        # The mixin tests loop over the classes: none would make every test pass without running anything.
        self.assertTrue(self.image_processing_classes, "no image processor class under test")


class Sapiens2PoseImageProcessingTest(Sapiens2ImageProcessingCases, unittest.TestCase):
    task = "pose"


@unittest.skipUnless(OURS, "transformers' processor has no task policies: the pose case runs it once")
class Sapiens2SegImageProcessingTest(Sapiens2ImageProcessingCases, unittest.TestCase):
    task = "seg"


@unittest.skipUnless(OURS, "transformers' processor has no task policies: the pose case runs it once")
class Sapiens2NormalImageProcessingTest(Sapiens2ImageProcessingCases, unittest.TestCase):
    task = "normal"


@unittest.skipUnless(OURS, "transformers' processor has no task policies: the pose case runs it once")
class Sapiens2PointmapImageProcessingTest(Sapiens2ImageProcessingCases, unittest.TestCase):
    task = "pointmap"


@unittest.skipUnless(OURS, "transformers' processor has no task policies: the pose case runs it once")
class Sapiens2AlbedoImageProcessingTest(Sapiens2ImageProcessingCases, unittest.TestCase):
    task = "albedo"


@unittest.skipUnless(OURS, "transformers' processor has no task policies: the pose case runs it once")
class Sapiens2MattingImageProcessingTest(Sapiens2ImageProcessingCases, unittest.TestCase):
    task = "matting"


@unittest.skipUnless(OURS, "transformers' processor has no task policies: the pose case runs it once")
class Sapiens2PretrainImageProcessingTest(Sapiens2ImageProcessingCases, unittest.TestCase):
    task = "pretrain"


# ---------------------------------------------------------------------------------------------------------------
# The control: deliberately broken classes. The mixin tests named in tests/transformers_suite.py (`control`) must
# fail on them, and a test they do not break must pass: proof that the mixins run these classes and check them.
# ---------------------------------------------------------------------------------------------------------------


class HiddenStatesIgnoringModel(BaseModel):
    """Our backbone model, except that `forward` drops the `output_hidden_states` argument."""

    def forward(self, pixel_values, **kwargs):
        kwargs.pop("output_hidden_states", None)
        return super().forward(pixel_values, **kwargs)


class BrokenHiddenStatesModelTest(Sapiens2ModelCases, unittest.TestCase):
    all_model_classes = (HiddenStatesIgnoringModel,)


class SizeIgnoringImageProcessor(PROCESSOR_CLASSES["torchvision"]):
    """Our image processor, except that it resizes to 40x40 whatever its `size`."""

    @property
    def input_size(self):
        return (40, 40)


class BrokenSizeImageProcessingTest(Sapiens2ImageProcessingCases, unittest.TestCase):
    processor_classes = {"torchvision": SizeIgnoringImageProcessor}
    task = "seg"
