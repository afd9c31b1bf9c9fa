"""The command line (`sparkiq ...`, in `main`) and the processes it runs.

`main` holds the commands (`table` the `sparkiq table` group, `common` the options and
helpers they share), `options` makes the serve options from the settings models,
`clusterview` draws `sparkiq cluster`, `serving` runs one node with its HTTP server and
`logs` configures that process's logging.
"""
