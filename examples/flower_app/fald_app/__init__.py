"""FA-LD with Flower: the template app (edit fald_app/model.py for your model and data)."""
