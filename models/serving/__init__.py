"""The drawn network outside torch, for serving: the K fixed posterior draws
(``models.nn.draws.DrawnNetwork``) as a weight-free ONNX Runtime graph whose drawn weights are fed from memory
at load (``onnx_backend.py``: grouped or per-draw graph, fp32, CPU or CUDA provider), and its int8 form, the
per-draw graph with statically quantised convolutions, quantised at load from the range table the artifact
ships (``int8.py``). Which precision may serve is decided in ``models.platform.compute``.
"""
