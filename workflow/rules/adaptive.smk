# An adaptive sweep (`adaptive:`): after each round of a benchmark that several policies evaluate, a decision
# reads the round's finished batches and writes which policies continue (evalwf.report.adaptive). A checkpoint:
# the next round's batches are planned once it is written, for the policies it lets continue.


checkpoint decide_round:
    input:
        decision_inputs,
    output:
        f"{RESULTS}/{{run}}/comparison/{{benchmark}}/rounds/round-{{round}}.json",
    log:
        f"{RESULTS}/{{run}}/comparison/{{benchmark}}/rounds/round-{{round}}.log",
    localrule: True
    params:
        # what the decision depends on besides its batches: changing alpha or the rule decides again
        adaptive=CAMPAIGN.config.adaptive_block(),
    run:
        jobs.run_logged(
            log[0],
            jobs.decide_round,
            CAMPAIGN,
            wildcards.benchmark,
            int(wildcards.round),
            output[0],
        )


# Round q's batches of the policies no outcome of round q - 1 can drop start as soon as decision q - 2 is written,
# alongside round q - 1 (a final target; the file lists what it asked for).
rule start_round_early:
    input:
        early_round_batches,
    output:
        f"{RESULTS}/{{run}}/comparison/{{benchmark}}/rounds/early-{{round}}.txt",
    log:
        f"{RESULTS}/{{run}}/comparison/{{benchmark}}/rounds/early-{{round}}.log",
    localrule: True
    run:
        jobs.run_logged(log[0], jobs.note_early_round, output[0], list(input))
