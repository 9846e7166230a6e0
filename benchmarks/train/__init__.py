"""The bundled train.py: its metric over seeds."""
