"""Where the network runs and in which arithmetic: what this CPU runs natively (``cpu.py``), the CUDA
math settings (``cuda.py``: IEEE fp32, native-only bf16, deterministic cuDNN), and the one device, precision
and draw-strategy decision training and serving share (``compute.py``: ``resolve()`` returns a ``Runtime``
saying what runs and why). It names no setting or flag: callers pass their own values and their own fix text.
"""
