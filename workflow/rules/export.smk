# Export to experiment trackers (the config's `export:` block, docs/trackers.md): one rule per tracker, run once
# everything the campaign ends in is written (the landing page waits for every summary and comparison). Nothing
# reads what it writes (results/<run>/export/<tracker>.json, the tracker runs it wrote), so results never depend
# on it; a tracker that is not installed was refused before any job ran (rules/common.smk).


for _target in EXPORT_TARGETS:

    rule:
        name:
            f"export_{_target.name}"
        input:
            f"{RESULTS}/{CAMPAIGN.run}/campaign.yaml",
            LANDING,
        output:
            export_record(_target),
        log:
            str(CAMPAIGN.root / "logs" / f"export_{_target.name}.log"),
        localrule: True
        params:
            target=repr(_target),  # another store or project exports again
            tracker=_target.name,
        run:
            jobs.run_logged(
                log[0], jobs.export_results, CAMPAIGN, params.tracker, output[0]
            )
