"""Export for TF Serving: `saved_model.export_model` writes a versioned
SavedModel whose graph (`graph`) decodes and preprocesses images, with its
warm-up records and serving files (`files`); its options are
`options.ExportOptions`. `keras-vit-export`
(keras_vit/commands/export.py) is the command line.
"""
