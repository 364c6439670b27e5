"""Evidence: every notebook execution leaves a checkable record (layer 5, drivers).

    run_record, notebook, environment   run.json's declared classes; what notebook code records; where it ran
    parameters   the notebook's `parameters` cell and the type check of given values
    runtime, runner                     papermill and the kernels; run_notebook, run_batch
    verify       verify_evidence: parameters, pinned files, checkpoint roots and git commit of a run
    replay, replay_at_commit            --replay with today's code, or with the commit a record names
    report       HTML reports over runs/

docs/formats/run-records.md ("Run records") is the reference for run.json and the metric sidecars.
"""
