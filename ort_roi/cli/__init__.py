"""The command-line tools: ``ort-roi`` (main.py) and its commands."""
