"""The Bayesian network and its maths, all in torch: the variational posteriors (``posteriors.py``) and
priors (``priors.py``), the layers over a leading Monte Carlo sample axis (``layers.py``), the VGG-16* builder
(``vgg.py``) and the registry every network, served or trained, is built through (``registry.py``), the KL term
(``kl.py``), explicit control of weight sampling (``sampling.py``: seeds, mean-only passes), pruning by
signal-to-noise and the packed form of a pruned state_dict (``pruning.py``), the predictive uncertainty of S
Monte Carlo probabilities (``uncertainty.py``: p-bar, entropies, mutual information), and the serving form:
K fixed posterior draws run as one deterministic network (``draws.py``: ``DrawnNetwork``, ``ServingDraws``),
which the artifact hands out and which ``models.serving`` exports to ONNX Runtime.
"""
