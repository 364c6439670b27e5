"""What each `kit` command runs: one module per group of commands, each importing its drivers (torch,
transformers, the evidence runner) at module level. `kit.cli.main` imports the module of the command
being run, and only that one (`command_handler` in kit/cli/__init__.py), so the parser, `kit --help` and a
usage error import no torch. A leaf parser names its handler as "module:function"
(`handler="kit.cli.handlers.adaptive:cmd_train"`).
"""
