"""TrainingArguments files as transformers writes them, for test_config.

Run by hand (needs transformers):  python3 tests/parity/make_hf_training_args.py
Writes tests/parity/fixtures/hf_training_args_default.json (every field at its
default), hf_training_args_custom.json (the fields a fine-tuning recipe
sets) and hf_seq2seq_training_args.json (Seq2SeqTrainingArguments' own), each the JSON of TrainingArguments.to_json_string(): the file a user
saves from a run and hands to HfArgumentParser.parse_json_file.
"""
import os

from transformers import Seq2SeqTrainingArguments, TrainingArguments

HERE = os.path.dirname(os.path.abspath(__file__))


def write(name, cls=TrainingArguments, **kw):
    args = cls(output_dir="out", **kw)
    with open(os.path.join(HERE, "fixtures", name), "w") as f:
        f.write(args.to_json_string())


write("hf_training_args_default.json")
write("hf_training_args_custom.json", do_train=True, do_eval=True, num_train_epochs=2.0,
      per_device_train_batch_size=16, per_device_eval_batch_size=32, gradient_accumulation_steps=2,
      learning_rate=3e-5, weight_decay=0.01, lr_scheduler_type="cosine_with_min_lr",
      lr_scheduler_kwargs={"min_lr": 1e-6}, warmup_steps=20, eval_strategy="steps", eval_steps=50,
      eval_delay=100, save_strategy="steps", save_steps=50, save_total_limit=2,
      load_best_model_at_end=False, metric_for_best_model="accuracy", logging_steps=10,
      train_sampling_strategy="sequential", report_to=["tensorboard"], seed=7, data_seed=11,
      dataloader_prefetch_factor=4, dataloader_num_workers=4, ddp_bucket_cap_mb=50,
      label_smoothing_factor=0.1, max_grad_norm=0.5)
write("hf_seq2seq_training_args.json", Seq2SeqTrainingArguments, do_train=True, num_train_epochs=1,
      predict_with_generate=True, generation_max_length=64, generation_num_beams=4, sortish_sampler=True)
