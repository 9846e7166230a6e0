"""One run: a commit on a seed, from its spec to its verdict. Read it in this order:

1. `plan.RunPlan`: how every run of a night happens, made from the Program once (budget,
   grace and so the deadline, limits, the command, the evaluator); `plan.results_dir`;
2. `data`: the prepared data folder and the repository's `data:` folder a run sees;
3. `grading`: what each of its two steps may see (hidden splits and the held-out bytes'
   sources) and the evaluation step's spec;
4. `executor.RunExecutor.prepare`: the run's folder, snapshot and `RunSpec`s, and its
   run_started; `cluster.execute` then runs both steps on whatever worker holds the job,
   reading the curve live (`live`) and telling a display (`observer`);
5. `executor.RunExecutor.finish`: the verdict (agent.decide.integrity.judge_run over the
   evidence, `budget.judge_budget`, `seeding`), what of its outputs is kept (`outputs`), its
   provenance, and its run_finished in the ledger.

The night (agent/night/) decides which runs to make; this package makes one."""
