"""Reading and writing models and files: load, save, external data, the atomic commit,
the output plan (names, guards), the one reader.
"""
