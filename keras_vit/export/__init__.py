"""Export for TF Serving: `saved_model.export_model` writes a versioned
SavedModel whose graph (`graph`) decodes and preprocesses images, with its
warm-up records and serving files (`files`). `python -m keras_vit.export`
runs the command line (`cli`).
"""
