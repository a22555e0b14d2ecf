# One sealed manifest per benchmark task and manifest scope: what defines its episodes.
# Runs where batches run (building a RoboTwin manifest needs the simulator and a GPU).


rule plan_manifest:
    output:
        f"{RESULTS}/{{run}}/{{benchmark}}/manifests/{{scope}}/{{task}}.{{digest}}.json",
    log:
        f"{RESULTS}/{{run}}/{{benchmark}}/logs/manifests/{{scope}}/{{task}}.{{digest}}.log",
    resources:
        gpu=manifest_gpu_resource,
    run:
        jobs.run_logged(
            log[0],
            jobs.seal_task_manifest,
            CAMPAIGN,
            wildcards.benchmark,
            wildcards.scope,
            wildcards.task,
            wildcards.digest,
            output[0],
        )
