"""`evalwf <subcommand>`: everything a user runs by hand (plan, status, task, worker, policy check, serve, compare,
benchmark, doctor, demo). Each subcommand is a thin module that parses its options and calls the part that owns
the work.

May import every part; nothing imports it.
"""
