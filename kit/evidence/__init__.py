"""Evidence: every notebook execution leaves a checkable record (layer 5, drivers).

    run_record  the run.json schema: reading, validating and writing records, the runs folder's layout
    notebook    the calls a notebook makes from inside its kernel (record_roots, record_metric,
                record_inputs, ArmUnavailable, ArmAborted); importable without torch or papermill
    environment git state, package versions and devices: what every record says about where it ran
    records     the former single module's names, re-exported for the notebooks that import them
    parameters  the notebook's `parameters` cell (NAME = literal) and the type check of given values
    runtime     finding papermill and the kernel packages, including wheels brought in `.whl/`
    runner      run_notebook (papermill into runs/<run-id>/), run_batch over a plan
    verify      verify_evidence: parameters, pinned files, checkpoint roots and git commit of a run
    report      an HTML report (nbconvert, inputs hidden by tag, images embedded) over runs/

docs/formats.md ("Run records") is the reference for run.json and the metric sidecars.
"""
