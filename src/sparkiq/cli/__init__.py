"""The command line (`sparkiq ...`, in `main`) and the processes it runs.

`main` holds the commands, `options` makes their options from the settings models,
`clusterview` draws `sparkiq cluster`, `serving` runs one node with its HTTP server and
`logs` configures that process's logging.
"""
