"""The toy pretraining setting and kNN probe shared by tests/test_pretraining_evidence.py (its module docstring
describes the setting) and benchmarks/bench_curation_scale.py. A helper module, not a test module."""

import math

import torch
import torch.nn.functional as F

from sapiens2_hf.pretraining import (
    MultiCropAugmentation,
    MultiCropCollator,
    Sapiens2ForPreTraining,
    ema_momentum,
    example_seed,
    tiny_pretraining_config,
)
from sapiens2_hf.pretraining.multicrop import normalize_image


IMAGE_SIZE = 32
AUGMENTATION = MultiCropAugmentation.tiny(global_crop_size=(IMAGE_SIZE, IMAGE_SIZE), local_crop_size=(16, 16))


def evidence_config(**overrides):
    backbone = {
        "hidden_size": 64,
        "intermediate_size": 256,
        "patch_size": 8,
        "image_size": [IMAGE_SIZE, IMAGE_SIZE],
        "layerscale_value": 1.0,
    }
    kwargs = {
        "decoder_hidden_size": 64,
        "cls_num_prototypes": 16,
        "patch_num_prototypes": 16,
        "ema_momentum": 0.95,
    }
    kwargs.update(overrides)
    return tiny_pretraining_config(backbone_overrides=backbone, **kwargs)


def pretrain(config, images, steps, seed, batch_size=16, learning_rate=2e-3):
    """Plain training loop over random batches of `images`; returns the model and the per-step outputs' terms."""
    torch.manual_seed(seed)
    model = Sapiens2ForPreTraining(config).train()
    collator = MultiCropCollator.from_config(config, AUGMENTATION)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=learning_rate, weight_decay=0.04)
    warmup = max(1, steps // 10)
    history = []
    for step in range(steps):
        scale = min(1.0, (step + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * step / steps))
        for group in optimizer.param_groups:
            group["lr"] = learning_rate * scale
        generator = torch.Generator().manual_seed(seed * 100_003 + step)
        indices = torch.randint(0, len(images), (batch_size,), generator=generator).tolist()
        batch = collator([{"image": images[i], "seed": example_seed(seed, step, i)} for i in indices])
        outputs = model(**batch, schedule_step=step)
        optimizer.zero_grad()
        outputs.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 3.0)  # DINOv2's clip value
        optimizer.step()
        model.update_teacher(ema_momentum(step, steps, config))
        history.append({k: float(v.detach()) for k, v in outputs.items() if k.endswith(("_loss", "_entropy")) or k == "loss"})
    return model, history


@torch.no_grad()
def cls_features(backbone, images):
    backbone.eval()
    return F.normalize(backbone(normalize_image(images.float())).pooler_output, dim=-1)


def knn_accuracy(train_features, train_labels, test_features, test_labels, k=10, temperature=0.07):
    """Weighted kNN (DINO's evaluation: cosine similarity, k neighbours weighted by exp(sim / T))."""
    similarity, neighbours = (test_features @ train_features.T).topk(k, dim=1)
    votes = torch.zeros(len(test_features), int(train_labels.max()) + 1)
    votes.scatter_add_(1, train_labels[neighbours], torch.exp(similarity / temperature))
    return (votes.argmax(dim=1) == test_labels).float().mean().item()
