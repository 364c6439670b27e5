"""Evidence: every notebook execution leaves a checkable record (layer 5, drivers).

    run_record, notebook, environment   run.json's schema; what notebook code records; where it ran
    records      the names the committed notebooks import, re-exported from those three
    parameters   the notebook's `parameters` cell and the type check of given values
    runtime, runner                     papermill and the kernels; run_notebook, run_batch
    verify       verify_evidence: parameters, pinned files, checkpoint roots and git commit of a run
    report       HTML reports over runs/

docs/formats/run-records.md ("Run records") is the reference for run.json and the metric sidecars.
"""
