"""`check` as a library and its reports: the checker, suppressions, project configuration,
summaries, renderers and output formats.
"""
