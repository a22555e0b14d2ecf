# One job per episode batch: evaluates episodes [start, start+count) of one task against the policy.


rule evaluate_batch:
    input:
        manifest=manifest_of,
    output:
        f"{OUT}/{{benchmark}}/batches/{{suite}}/{{task}}/{{batch}}.json",
    log:
        f"{OUT}/{{benchmark}}/logs/batches/{{suite}}/{{task}}/{{batch}}.log",
    resources:
        gpu=1,
        expected_cost_s=expected_cost_resource,
        episodes=episodes_resource,
        adaptive_round=adaptive_round_resource,
    params:
        policy=policy_param,
        policy_identity=policy_identity_param,
        manifest=manifest_digest_param,
        settings=settings_param,
    run:
        jobs.run_logged(
            log[0],
            jobs.evaluate_batch,
            campaign_of(wildcards),
            wildcards.benchmark,
            wildcards.suite,
            wildcards.task,
            wildcards.batch,
            output[0],
        )
