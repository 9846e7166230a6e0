#!/usr/bin/env python
"""
Fine-tuning a sequence classifier with the Hugging Face Trainer.
(Imitation for Nightshift's tests: the shape of a `run_glue.py`-style script, argument
dataclasses parsed from the command line, `set_seed(training_args.seed)`, Trainer-style
logs, `checkpoint-N/` folders and `all_results.json` in --output_dir, but no transformers,
no model and no download: the metrics are made up from the hyper-parameters and the seed.)
"""
import argparse
import dataclasses
import json
import math
import os
import random
import time
from dataclasses import dataclass, field


@dataclass
class ModelArguments:
    model_name_or_path: str = field(
        default="distilbert-base-uncased", metadata={"help": "Path to pretrained model or model identifier"})


@dataclass
class TrainingArguments:
    output_dir: str = field(default="tmp_trainer", metadata={"help": "Where predictions and checkpoints go."})
    do_train: bool = field(default=False, metadata={"help": "Whether to run training."})
    do_eval: bool = field(default=False, metadata={"help": "Whether to run eval on the dev set."})
    learning_rate: float = field(default=5e-5, metadata={"help": "The initial learning rate for AdamW."})
    weight_decay: float = field(default=0.0, metadata={"help": "Weight decay for AdamW if we apply some."})
    warmup_steps: int = field(default=0, metadata={"help": "Linear warmup steps."})
    num_train_epochs: float = field(default=3.0, metadata={"help": "Total number of training epochs."})
    per_device_train_batch_size: int = field(default=8, metadata={"help": "Batch size per device."})
    lr_scheduler_type: str = field(default="linear", metadata={"help": "The scheduler type to use."})
    save_steps: int = field(default=500, metadata={"help": "Save checkpoint every X updates steps."})
    seed: int = field(default=42, metadata={"help": "Random seed that will be set at the beginning of training."})


def parse_args():
    parser = argparse.ArgumentParser()
    for cls in (ModelArguments, TrainingArguments):
        for f in dataclasses.fields(cls):
            if f.type in (bool, "bool"):
                parser.add_argument(f"--{f.name}", action="store_true")
            else:
                kind = {"float": float, "int": int, "str": str}.get(f.type, f.type)
                parser.add_argument(f"--{f.name}", type=kind, default=None)
    given = vars(parser.parse_args())
    return [cls(**{f.name: given[f.name] for f in dataclasses.fields(cls) if given[f.name] not in (None, False)})
            for cls in (ModelArguments, TrainingArguments)]


def set_seed(seed):
    random.seed(seed)


def main():
    model_args, training_args = parse_args()
    set_seed(training_args.seed)
    os.makedirs(training_args.output_dir, exist_ok=True)
    print(f"Training/evaluation parameters {training_args}")
    steps_per_epoch = 100
    total = int(training_args.num_train_epochs * steps_per_epoch)
    best = 0.35 + 0.15 * abs(math.log10(training_args.learning_rate / 3e-5)) \
        + 0.5 * abs(training_args.warmup_steps / total - 0.06) + 0.4 * abs(training_args.weight_decay - 0.01)
    noise = random.gauss(0, 0.01)
    start = time.time()
    for step in range(1, total + 1):
        if step % 50 == 0:
            loss = best + (0.69 - best) * math.exp(-step / 80) + noise
            print({"loss": round(loss, 4), "learning_rate": training_args.learning_rate, "epoch": round(step / steps_per_epoch, 2)})
        if step % training_args.save_steps == 0 or step == total:
            folder = os.path.join(training_args.output_dir, f"checkpoint-{step}")
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, "pytorch_model.bin"), "wb") as fh:
                fh.write(b"\0" * 1_200_000)
            with open(os.path.join(folder, "trainer_state.json"), "w") as fh:
                json.dump({"global_step": step}, fh)
    runtime = time.time() - start
    metrics = {"epoch": training_args.num_train_epochs, "train_runtime": round(runtime, 4),
               "train_samples_per_second": round(total * training_args.per_device_train_batch_size / max(runtime, 1e-6), 1)}
    if training_args.do_eval:
        eval_loss = best + (0.69 - best) * math.exp(-total / 80) + noise
        metrics.update(eval_loss=round(eval_loss, 6), eval_accuracy=round(1 - eval_loss / 2, 6))
        print("***** eval metrics *****")
        for key, value in sorted(metrics.items()):
            print(f"  {key:<24}= {value}")
    with open(os.path.join(training_args.output_dir, "all_results.json"), "w") as fh:
        json.dump(metrics, fh, indent=4, sort_keys=True)


if __name__ == "__main__":
    main()
