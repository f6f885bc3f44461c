"""The image path training and serving both run on a file, so a model sees at serving time the pixels
it saw in training: the decode to 8-bit RGB (``decode.py``), the field-of-view circle of a fundus photograph
(``fov.py``), the preprocessing contracts an artifact names (``preprocessing.py``), the transform an artifact
hands out, file or bytes to the network's input (``transform.py``), and the quality gate that decides whether
a photograph is gradable (``quality.py``; its thresholds and findings in ``quality_rules.py``).
"""
