# Gather, one rule per configured benchmark (per policy and the benchmarks it evaluates in a campaign of several
# policies): validate every batch, then write
# the outputs that Campaign.summary_paths names (task and suite CSVs, summary.md, summary.tex, the plot,
# summary.html for the report's landing page, the reference comparison) and print the tables. A policy's summary
# needs only its own batches. Captions: workflow/report/<key>.rst.


for _campaign in CAMPAIGN.policy_campaigns():
    _prefix = (
        f"{re.sub(r'[^A-Za-z0-9_]', '_', _campaign.policy.name)}_"
        if CAMPAIGN.multi
        else ""
    )
    for _benchmark in _campaign.benchmarks:
        _outputs = _campaign.summary_paths(_benchmark)

        rule:
            name:
                f"summarize_{_prefix}{_benchmark}"
            input:
                batches=policy_batches(_benchmark, _campaign),
                manifests=all_manifests(_benchmark),
            output:
                **{
                    key: report(
                        path,
                        category=(
                            f"{_campaign.policy.name}: {_benchmark}"
                            if CAMPAIGN.multi
                            else _benchmark
                        ),
                        caption=f"../report/{caption_of(key)}.rst",
                        labels={"output": key},
                    )
                    for key, path in _outputs.items()
                },
            log:
                str(_campaign.benchmark_dir(_benchmark) / "logs" / "summarize.log"),
            localrule: True
            params:
                results=_campaign.results_digest(_benchmark),
                policy=_campaign.policy.name,
                benchmark=_benchmark,
            run:
                jobs.run_logged(
                    log[0],
                    jobs.summarize,
                    CAMPAIGN,
                    params.policy,
                    params.benchmark,
                    output,
                )

    if CAMPAIGN.multi:

        # a target per policy: `snakemake policy_<name>` evaluates and summarises that policy alone
        rule:
            name:
                f"policy_{_prefix.rstrip('_')}"
            input:
                policy_summaries(_campaign),
            localrule: True


# A benchmark that several policies evaluate: success per policy per suite and task, and each policy against the
# benchmark's baseline (Newcombe).
for _benchmark in CAMPAIGN.compared_benchmarks():

    rule:
        name:
            f"compare_policies_{_benchmark}"
        input:
            [
                member.summary_paths(_benchmark)["tasks"]
                for member in CAMPAIGN.policies_of(_benchmark)
            ]
            + ([final_decision(_benchmark)] if _benchmark in ADAPTIVE else [])
            + speculated_rounds(_benchmark),
        output:
            **{
                key: report(
                    path,
                    category="comparison",
                    caption=f"../report/comparison_{key}.rst",
                    labels={"output": key, "benchmark": _benchmark},
                )
                for key, path in CAMPAIGN.comparison_paths(_benchmark).items()
            },
        log:
            str(CAMPAIGN.comparison_dir(_benchmark) / "compare.log"),
        localrule: True
        params:
            results=CAMPAIGN.results_digest(_benchmark),
            benchmark=_benchmark,
        run:
            jobs.run_logged(
                log[0], jobs.compare_policies, CAMPAIGN, params.benchmark, output
            )


# The report's landing page (workflow/report/workflow.rst includes it): every summary's headline and plot,
# the comparisons across policies first.
rule report_landing:
    input:
        f"{RESULTS}/{CAMPAIGN.run}/planned_cost.json",  # its cost line: planned at submission vs took
        [
            path
            for campaign in CAMPAIGN.policy_campaigns()
            for path in policy_summaries(campaign)
        ],
        [
            path
            for benchmark in CAMPAIGN.compared_benchmarks()
            for path in CAMPAIGN.comparison_paths(benchmark).values()
        ],
    output:
        report(
            LANDING,
            category="campaign",
            caption="../report/landing.rst",
            labels={"output": "landing page"},
        ),
    log:
        str(CAMPAIGN.root / "logs" / "report_landing.log"),
    localrule: True
    run:
        jobs.run_logged(log[0], jobs.write_landing, CAMPAIGN, output[0])
