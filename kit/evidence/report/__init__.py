"""`kit report`: the evidence of a runs directory as one offline HTML page. One module per part:
page (build, execute, export, collapse), readings (the verdicts screen: estimates, intervals, readings, power),
accuracy (from kit.results), seed_knew (the seed's build record), noise (power and training noise), history
(every seed's verdicts), runs (the run table), scope, pilots (the pilot records: candidates, chosen, positive
control), verdict_rows and verdicts (with analysis and cost), sections (each run's header), sidecars (one
dispatch from a sidecar to its view), evaluation_files (the per-item files), figures and format (the one way of
writing values). The index module is the runs directory they all read, selection the `DIR/GLOB` they are given
(parsed once), sidecar_formats the declared sidecars whose fields they read.

This file imports none of them: importing one part (kit.evidence.results reads format and index) must not run
the page builder, which reads kit.evidence.results. `render_report` is kit.evidence.report.page's (and `kit`'s).
"""
