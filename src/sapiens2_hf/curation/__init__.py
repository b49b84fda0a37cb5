"""Curation of pretraining data: the Humans-1B recipe's stages (decodable, size, quality, a prominent person,
near-duplicates, domain, balance) as a pipeline from a pile of images to a `datasets.Dataset` that
`training_scripts/pretrain.py --dataset_name` reads (`sapiens2-hf curate`, `curate(...)`). See `curate.py`.
"""

from .curate import (STAGES, BackboneEmbedder, CurationConfig, CurationResult, ImageSource, PersonSegmenter, curate,
                     decode_image, measure_image, open_inputs, quality_rank)
from .global_stages import kmeans
from .report import write_report

__all__ = ["BackboneEmbedder", "CurationConfig", "CurationResult", "ImageSource", "PersonSegmenter", "STAGES",
           "curate", "decode_image", "kmeans", "measure_image", "open_inputs", "quality_rank", "write_report"]
