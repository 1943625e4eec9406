"""Reading and writing models and files: load, save, external data, the atomic commit,
output guards, the one reader.
"""
