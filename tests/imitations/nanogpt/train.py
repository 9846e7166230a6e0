"""
This training script can be run both on a single gpu in debug mode,
and also in a larger training run with distributed data parallel (ddp).
(Imitation of karpathy/nanoGPT's train.py for Nightshift's tests: the same configuration
habits, data paths, log lines and checkpoint, but no model: the loss is a made-up function
of the hyper-parameters plus noise from torch's global seed.)

To run on a single GPU, example:
$ python train.py --batch_size=32 --compile=False
"""

import math
import os
import time

import torch

# -----------------------------------------------------------------------------
# default config values designed to train a gpt2 (124M) on OpenWebText
# I/O
out_dir = 'out'
eval_interval = 2000
log_interval = 1
eval_iters = 200
eval_only = False # if True, script exits right after the first eval
always_save_checkpoint = True # if True, always save a checkpoint after each eval
init_from = 'scratch' # 'scratch' or 'resume' or 'gpt2*'
# wandb logging
wandb_log = False # disabled by default
wandb_project = 'owt'
wandb_run_name = 'gpt2' # 'run' + str(time.time())
# data
dataset = 'openwebtext'
gradient_accumulation_steps = 5 * 8 # used to simulate larger batch sizes
batch_size = 12 # if gradient_accumulation_steps > 1, this is the micro-batch size
block_size = 1024
# model
n_layer = 12
n_head = 12
n_embd = 768
dropout = 0.0 # for pretraining 0 is good, for finetuning try 0.1+
bias = False # do we use bias inside LayerNorm and Linear layers?
# adamw optimizer
learning_rate = 6e-4 # max learning rate
max_iters = 600000 # total number of training iterations
weight_decay = 1e-1
beta1 = 0.9
beta2 = 0.95
grad_clip = 1.0 # clip gradients at this value, or disable if == 0.0
# learning rate decay settings
decay_lr = True # whether to decay the learning rate
warmup_iters = 2000 # how many steps to warm up for
lr_decay_iters = 600000 # should be ~= max_iters per Chinchilla
min_lr = 6e-5 # minimum learning rate, should be ~= learning_rate/10 per Chinchilla
# system
device = 'cuda' # examples: 'cpu', 'cuda', 'cuda:0', 'cuda:1' etc., or try 'mps' on macbooks
dtype = 'float32'
compile = True # use PyTorch 2.0 to compile the model to be faster
iter_sleep = 0.0 # (imitation only) seconds per iteration, standing for real compute
eval_sleep = 0.0 # (imitation only) seconds per evaluation
# -----------------------------------------------------------------------------
config_keys = [k for k,v in globals().items() if not k.startswith('_') and isinstance(v, (int, float, bool, str))]
exec(open('configurator.py').read()) # overrides from command line or config file
config = {k: globals()[k] for k in config_keys} # will be useful for logging
# -----------------------------------------------------------------------------

master_process = True
seed_offset = 0
os.makedirs(out_dir, exist_ok=True)
torch.manual_seed(1337 + seed_offset)

# poor man's data loader
data_dir = os.path.join('data', dataset)
with open(os.path.join(data_dir, 'train.bin'), 'rb') as f:
    train_data = f.read()
with open(os.path.join(data_dir, 'val.bin'), 'rb') as f:
    val_data = f.read()
print(f"found {len(train_data)} train and {len(val_data)} val tokens in {data_dir}")

# the made-up loss: best near learning_rate 2e-3, beta2 0.99, dropout 0.1, warmup_iters 100,
# deeper a bit better (every knob of examples/nanogpt/program.md moves it, as in nanoGPT)
floor = (1.30 + 0.25 * abs(math.log10(learning_rate / 2e-3)) + 3.0 * abs(beta2 - 0.99)
         + 0.4 * abs(dropout - 0.1) + 0.3 / n_layer + 0.05 * abs(math.log10(min_lr / 1e-4))
         + 0.02 * abs(math.log10((warmup_iters + 10) / 110)))
run_noise = 0.02 * torch.randn()

def estimate_loss(it):
    progress = 1.0 - math.exp(-it / max(1, max_iters / 5))
    loss = 4.17 - (4.17 - floor) * progress + run_noise
    return {'train': loss - 0.04, 'val': loss}

# training loop
t0 = time.time()
best_val_loss = 1e9
for iter_num in range(max_iters + 1):
    if iter_num % eval_interval == 0 and master_process:
        losses = estimate_loss(iter_num)
        time.sleep(eval_sleep)
        print(f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
        if losses['val'] < best_val_loss or always_save_checkpoint:
            best_val_loss = losses['val']
            if iter_num > 0:
                print(f"saving checkpoint to {out_dir}")
                with open(os.path.join(out_dir, 'ckpt.pt'), 'wb') as f:
                    f.write(b"\0" * 1_500_000)
    if iter_sleep:
        time.sleep(iter_sleep)
    t1 = time.time()
    dt = t1 - t0
    t0 = t1
    if iter_num % log_interval == 0 and master_process:
        lossf = estimate_loss(iter_num)['train'] + 0.01 * torch.randn()
        print(f"iter {iter_num}: loss {lossf:.4f}, time {dt*1000:.2f}ms, mfu -100.00%")
