"""Procedural synthetic fundus photographs with DR-grade-driven lesions (no real data needed).

``generate_dataset`` writes a data set in the EyePACS layout; ``render_fundus`` draws one image in
one of the real camera frame formats (``FRAME_FORMATS``);
``quality_gate_examples`` gives non-fundus and ungradable reference images.
"""

from training.synthetic.camera import UNGRADABLE_KINDS
from training.synthetic.dataset import (
    DEFAULT_GRADE_PROBS,
    GENERATOR_VERSION,
    SYNTHETIC_STATEMENT,
    ImagePlan,
    generate_dataset,
    patient_grades,
    plan_image,
    render_image,
)
from training.synthetic.examples import QualityExample, quality_gate_examples
from training.synthetic.fundus import FRAME_FORMATS, FRAME_SHARES
from training.synthetic.lesions import CONFOUNDER_KINDS, LESION_KINDS
from training.synthetic.render import render_fundus

__all__ = [
    "CONFOUNDER_KINDS",
    "DEFAULT_GRADE_PROBS",
    "FRAME_FORMATS",
    "FRAME_SHARES",
    "GENERATOR_VERSION",
    "LESION_KINDS",
    "SYNTHETIC_STATEMENT",
    "UNGRADABLE_KINDS",
    "ImagePlan",
    "QualityExample",
    "generate_dataset",
    "patient_grades",
    "plan_image",
    "quality_gate_examples",
    "render_fundus",
    "render_image",
]
