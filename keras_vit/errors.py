"""The one error class of this project's own input checks.

Every check that keras_vit makes of what a user gave it (a flag, a config
field, a file, an image, a model option) raises `UsageError` with a message
that names the fix. The command lines print such an error as one line and
exit 1 (the traceback follows with --verbose); any other exception, a
ValueError from inside Keras or TensorFlow included, keeps its traceback.

`UsageError` is a `ValueError`, so code that caught ValueError still does.
"""


class UsageError(ValueError):
    """Bad input that the user can fix; the message says how."""
