"""A programme's own graded photographs adapt an artifact: ``radscreen-train adapt`` (``training.adapt.run``).

Three modes, measured against one another on the same eyes (docs/adapting.md, docs/results-real-eyes.md):
``recalibrate`` (the weights kept, the thresholds fitted on the site), ``posterior-prior`` (fine-tuning with the
parent's radial posterior as the prior, the seed paper's continual-learning use of a full-support posterior) and
``finetune`` (the same without the prior).
"""

from training.adapt.promise import SitePromise, site_promise
from training.adapt.run import MODES, AdaptRequest, AdaptResult, adapt
from training.adapt.site import AdaptError, needed_referable, read_site_labels
from training.adapt.tune import TuneOptions

__all__ = ["MODES", "AdaptError", "AdaptRequest", "AdaptResult", "SitePromise", "TuneOptions", "adapt",
           "needed_referable", "read_site_labels", "site_promise"]
