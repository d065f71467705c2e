"""The faults and bad inputs keras_vit is tested against, and what the user
gets for each: the table behind docs/reliability.md.

Every case is proved by one test in one of the files that
scripts/reliability_table.py's TEST_FILES lists (decorated
`@covers(case_id)`); that test asserts
the error type and that each excerpt in `says` appears verbatim in what the
user sees (the exception message or the log). scripts/reliability_table.py
renders this table to docs/reliability.md, and a test checks that the
published file is the rendering of this table, so neither can drift.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Dict, Tuple

FAULT = "fault"
BAD_INPUT = "bad input"


@dataclasses.dataclass(frozen=True)
class Case:
    """One fault or bad input.

    Attributes:
        id: str. Unique; names the case in tests and in the table.
        kind: str. FAULT (the process or the disk fails) or BAD_INPUT.
        area: str. Training, data, config, checkpoint, export, CLI, ...
        what: str. What goes wrong, in the user's words.
        gets: str. What the user gets: the error type, or the behaviour.
        says: tuple of str. Verbatim excerpts of the message (or log) that
            name the problem and the fix; the test asserts each one.
        error: str. Exception class name the test asserts ("" when the
            input works or the fault is recovered from).
    """

    id: str
    kind: str
    area: str
    what: str
    gets: str
    says: Tuple[str, ...] = ()
    error: str = ""


_CASES = [
    # ------------------------------------------------------------ faults
    Case(
        "kill_after_first_checkpoint", FAULT, "training",
        "`kill -9` of train.py right after its first checkpoint (step 10 of "
        "40)",
        "The same command resumes from the newest complete checkpoint. The "
        "four process faults of this table hit one workdir in a row, each "
        "followed by the same command; the run that finally completes has "
        "test metrics and checkpointed tensors bit-identical to an "
        "uninterrupted run with the same seed.",
        ("Resumed from",),
    ),
    Case(
        "kill_mid_run", FAULT, "training",
        "`kill -9` between two checkpoints (after step 25 was logged)",
        "Resumes from the newest complete checkpoint (ckpt-20).",
        ("Resumed from",),
    ),
    Case(
        "kill_during_checkpoint_write", FAULT, "training",
        "`kill -9` while ckpt-30 is being written (its shards are on disk, "
        "not yet merged under the final name)",
        "ckpt-30 never becomes visible: the state file still names ckpt-20, "
        "evaluation and export read ckpt-20, and the restart resumes from "
        "it; the leftover ckpt-30_temp/ goes with the next save of ckpt-30.",
        ("Resumed from",),
    ),
    Case(
        "sigterm", FAULT, "training",
        "SIGTERM (what a preempted TPU VM receives), arriving while ckpt-30 "
        "is being written",
        "The save completes, the run stops at step 30 with exit status 42 "
        "(every command's status after a preemption), and the same command "
        "resumes from ckpt-30 and runs to the end.",
        ("Stopped at step", "checkpoint saved. Run the same command to "
         "resume."),
    ),
    Case(
        "kill_during_export", FAULT, "export",
        "`kill -9` during a SavedModel export, before it is published",
        "No numbered version folder appears (TF Serving loads nothing "
        "partial); the next export publishes version 1 complete.",
    ),
    Case(
        "failed_remote_publish", FAULT, "export",
        "An export into a gs:// folder fails, or is killed, while it "
        "copies the version into place (a URL's folder has no rename)",
        "Its files are copied with saved_model.pb last and a failed copy "
        "is removed, so a version folder that holds saved_model.pb is "
        "whole; one a `kill -9` leaves without it is named by the next "
        "export (remove it), which takes the next number.",
        ("holds no saved_model.pb: that version was not completely "
         "published", "Remove the folder"),
    ),
    Case(
        "concurrent_exports", FAULT, "export",
        "Four processes adding models to one export folder's models.config "
        "at the same moment, twenty each",
        "Every entry is listed: the file is read and rewritten under a "
        "lock beside it (a gs:// folder has none; there, export one at a "
        "time).",
    ),
    Case(
        "litert_overwrite_interrupted", FAULT, "export",
        "keras-vit-export --format=litert --overwrite stopped after the new "
        "class names or preprocessing record were written, before the new "
        ".tflite replaced the old one",
        "keras-vit-predict refuses the files in one line naming the fix, "
        "instead of preprocessing the file as the record of another says "
        "or naming its classes with another's names; an export stopped "
        "before any write leaves the old files, which still predict.",
        ("an export stopped while it replaced them",
         "export the model again (--overwrite)"),
        "exit status 1",
    ),
    Case(
        "nan_batch_stops", FAULT, "training",
        "NaN in one training batch (default config)",
        "Training stops, naming the first bad step and the last good "
        "checkpoint, which exists and holds finite weights; nothing is "
        "saved after the bad step.",
        ("Non-finite loss", "first at step 13", "Last good checkpoint:",
         "ckpt-10", "set config.trainer.skip_nonfinite=True"),
        "TrainingError",
    ),
    Case(
        "nan_batch_skipped", FAULT, "training",
        "NaN in two training batches with `config.trainer.skip_nonfinite=True`",
        "Both updates are skipped and counted (log, metrics.json "
        "`skipped_steps_this_run`); the run ends at the configured step "
        "with finite checkpoints.",
        ("Skipped 1 non-finite step",),
    ),
    Case(
        "nonfinite_weights_update", FAULT, "training",
        "An update too large for float32 (learning rate 1e39, which a run "
        "config refuses up front: an optimizer of the Python API) makes "
        "the weights non-finite from a finite loss and gradient, with "
        "`config.trainer.skip_nonfinite=True`",
        "The run stops in one line naming a weight and the last good "
        "checkpoint, before any checkpoint holds the weights and before "
        "every later step is skipped.",
        ("The weights became non-finite by step",
         "Last good checkpoint"),
        "TrainingError",
    ),
    Case(
        "final_loss_nonfinite", FAULT, "training",
        "A learning rate so high (1e30) that the first update leaves the "
        "weights finite but the model's outputs overflow, with "
        "`config.trainer.skip_nonfinite=True` (every later step is "
        "skipped)",
        "After its final evaluation the run exits with status 1 in one "
        "line naming the evaluator's loss, the steps skipped and the fix. "
        "It is not marked finished (no metrics.json, no export), and the "
        "same command evaluates and refuses again.",
        ("The final evaluation's loss is not finite",
         "test_loss nan at step 10", "--config.schedule.lr"),
        "exit status 1",
    ),
    Case(
        "skip_leaves_state_unchanged", FAULT, "training",
        "What a skipped step does, under the default strategy and a "
        "2-replica MirroredStrategy (NaN on one replica only)",
        "Weights, AdamW moments and EMA averages are bit-identical to "
        "before the step; only the step counter advances. With SGD + "
        "momentum, a run with the bad batch equals the run without it.",
    ),
    Case(
        "resume_other_model_no_config", FAULT, "checkpoint",
        "Resuming in a workdir whose config.json was deleted and whose "
        "checkpoints hold another model (width 48, now 32)",
        "A clear error before any weight is loaded; config.json is not "
        "rewritten.",
        ("Cannot resume from", "is from a different model",
         "use a new `workdir`"),
        "TrainingError",
    ),
    Case(
        "restore_edited_config", FAULT, "checkpoint",
        "Evaluating/exporting a workdir whose config.json was edited to "
        "another depth (1 -> 2 layers)",
        "`workdir.restore_model` refuses instead of loading part of the "
        "weights.",
        ("is from a different model", "holds 20 trainable weights, the "
         "model 32", "put back the run's own config"),
        "UsageError",
    ),
    Case(
        "truncated_latest_checkpoint", FAULT, "checkpoint",
        "The newest checkpoint's data or index file is truncated (full "
        "disk, interrupted copy)",
        "The run warns and resumes from the newest complete checkpoint "
        "(ckpt-10 when ckpt-20 is damaged), then ends normally.",
        ("is unreadable", "resuming from the previous complete checkpoint"),
    ),
    Case(
        "truncated_checkpoint_as_model", FAULT, "checkpoint",
        "A run's newest checkpoint is truncated, and the run is given as "
        "`--model` (predict, evaluate, export, convert)",
        "The command warns and loads the newest complete checkpoint (ckpt-10 "
        "when ckpt-20 is damaged; one whose weights are not finite is passed "
        "over alike); when none can be used, one line naming each file, not "
        "a traceback.",
        ("cannot be used", "loading the one before it",
         "can be used: ckpt-20"),
    ),
    Case(
        "checkpoint_other_bytes", FAULT, "checkpoint",
        "A run's newest checkpoint data file holds other bytes at the same "
        "length (a copy gone wrong)",
        "Given as `--model`, the command warns with TensorFlow's reason and "
        "loads the checkpoint before; resumed, the run goes on from it "
        "(before, a traceback, and resume said the checkpoint did not match "
        "the model and asked for a new workdir).",
        ("cannot be used", "checksum does not match",
         "Resumed from"),
    ),
    Case(
        "missing_latest_checkpoint", FAULT, "checkpoint",
        "The newest checkpoint's files were deleted but the state file "
        "still lists it",
        "Resumes from the newest checkpoint still on disk, never from "
        "scratch (which would let checkpoint rotation delete the older "
        "ones).",
        ("is missing", "resuming from the previous complete checkpoint"),
    ),
    Case(
        "missing_checkpoint_list", FAULT, "checkpoint",
        "The checkpoints folder's list (checkpoints/checkpoint) is "
        "missing, empty or cut short (a copy that left it out)",
        "The run reads the ckpt-N checkpoints by their step and resumes "
        "from the newest, never from step 0; it writes the list again, so "
        "that rotation keeps working.",
        ("is missing or unreadable: reading the checkpoints there by their "
         "step numbers", "again from the checkpoints there"),
    ),
    Case(
        "foreign_config_json", BAD_INPUT, "workdir",
        "`--workdir` names a folder holding another program's config.json "
        "(a transformers model folder)",
        "Refused before anything is written; the file is left as it was.",
        ("config.json is a Hugging Face model's config, not a training "
         "run's", "nothing was written over", "use another --workdir",
         "config.init.model"),
        "UsageError",
    ),
    Case(
        "foreign_export", BAD_INPUT, "CLI",
        "keras-vit-predict --model= a SavedModel or .tflite file written by "
        "another tool (Keras's model.export, TF Hub), whose signature takes "
        "no image_bytes (images) or gives no probabilities",
        "One line, before any image is read, naming what the file takes "
        "and gives and the fix (it was a KeyError or TypeError traceback "
        "after every image had been decoded).",
        ("it is no export of keras-vit-export", "Export the model with "
         "keras-vit-export, or name the model itself"),
        "exit status 1",
    ),
    Case(
        "stop_swallowed_by_a_callback", FAULT, "CLI",
        "Ctrl-C or SIGTERM landing in a library's garbage-collection "
        "callback (JAX registers one), where Python prints \"Exception "
        "ignored\" and drops the exception",
        "The command still stops before it publishes a file (or when its "
        "work ends): its one stop line and status (130, or 42 for "
        "SIGTERM), nothing written; a training loop takes it as a stop "
        "request. Before, the command went on and wrote its results.",
        ("interrupted: stopped at once (Ctrl-C).",
         "preempted: stopped at once (SIGTERM)"),
    ),
    Case(
        "stop_after_the_work", FAULT, "CLI",
        "Ctrl-C or SIGTERM once a command has written and printed its "
        "results, while the interpreter shuts down (a second or more with "
        "TensorFlow loaded)",
        "The process ends with the work's status (0): at once, or, once "
        "its exit handlers run, when they are done. Before, the signal "
        "killed it with nothing printed (status 130 or 143).",
    ),
    Case(
        "stop_before_first_step", FAULT, "training",
        "Ctrl-C or SIGTERM before the first step (while the step compiles)",
        "The run stops without saving: a fresh workdir holds no checkpoint "
        "(another config may start there), a resumed run's checkpoint is "
        "not written again.",
        ("nothing trained, nothing saved",),
    ),
    Case(
        "stop_during_evaluation", FAULT, "training",
        "Ctrl-C or SIGTERM during a periodic evaluation (one host)",
        "The evaluation is left after its current batch and not recorded "
        "(a large evaluation set can outlast a short preemption notice); "
        "the run saves that step and stops. The same command evaluates "
        "that step first, then trains on.",
        ("was left unfinished at the stop (not recorded)",
         "checkpoint saved"),
    ),
    Case(
        "stop_during_final_evaluation", FAULT, "training",
        "Ctrl-C or SIGTERM during the final evaluation (one host)",
        "The evaluation is left after its current batch and not recorded; "
        "the last step's checkpoint is saved, nothing is exported and "
        "metrics.json is not written (status 42). The same command "
        "evaluates again and finishes, without training.",
        ("leaving the final evaluation, then stopping",
         "in its final evaluation; checkpoint saved. Run the same command "
         "to evaluate again and finish."),
    ),
    Case(
        "stop_before_best_record", FAULT, "training",
        "A kill after a best checkpoint (`config.checkpoints.keep_best`) "
        "is saved and before best.json records it",
        "The resumed run reads that checkpoint's accuracy back from "
        "history.csv (written before it was saved), records it again in "
        "best.json and compares later evaluations with it, so a worse "
        "one never replaces it.",
        ("(a stop fell between saving it and recording it): recorded "
         "again as step",),
    ),
    Case(
        "failed_metrics_write", FAULT, "workdir",
        "The disk fails while metrics.json is rewritten (simulated: the "
        "write raises ENOSPC half-way)",
        "The old metrics.json is intact and no temporary file is left; "
        "the OSError reaches the caller.",
        ("No space left on device",),
        "OSError",
    ),
    Case(
        "output_not_writable", BAD_INPUT, "export",
        "`--export_dir`, `--output` or `--output_dir` names a place this "
        "user may not write (a system folder, another user's)",
        "One line naming the path and the flag to change, before any work "
        "(an evaluation's results are not computed to be lost), not "
        "TensorFlow's traceback; nothing is written.",
        ("this user may write",),
        "exit status 1",
    ),
    Case(
        "run_folder_not_writable", BAD_INPUT, "CLI",
        "keras-vit-evaluate --mode=eval --workdir=RUN or keras-vit-analysis "
        "--curves=RUN without --output_dir, the run's folder not writable "
        "(a read-only mount, another user's run)",
        "One line naming the folder and --output_dir, before the model is "
        "read (was: a traceback after the whole evaluation); with "
        "--output_dir elsewhere the run is read where it lies.",
        ("its results go there without --output_dir",),
        "exit status 1",
    ),
    Case(
        "two_evaluations_one_output_folder", FAULT, "evaluation",
        "keras-vit-evaluate --mode=vtab or --mode=fewshot into an "
        "--output_dir that another such run is writing (of another model, "
        "recipe or data sets)",
        "One line, before the model loads; exit status 1; the other run's "
        "results are whole. Each run checks the results in the folder when "
        "it starts: two at once would write one model's among the other's. "
        "The run holds a lock on the folder (not on gs://) until it ends; "
        "not on the run folder it evaluates, which its training holds. "
        "--mode=eval checks its results file again as it writes it: "
        "another model's, written meanwhile, is refused, not replaced.",
        ("Another process is running the VTAB-1k or few-shot evaluation "
         "in", "give this run another --output_dir."),
        "exit status 1",
    ),
    Case(
        "two_runs_one_workdir", FAULT, "training",
        "keras-vit-train started on a workdir that another keras-vit-train "
        "is training (a second terminal, a job scheduled twice)",
        "One line, before anything is read or written; exit status 1. The "
        "process that trains holds a lock on the folder (not on gs://); it "
        "goes when that process ends, however it ends.",
        ("Another process is running the training run in",
         "let it end or stop it (the same command then resumes), or give "
         "this run another folder."),
        "exit status 1",
    ),
    Case(
        "disk_full_at_checkpoint", FAULT, "checkpoint",
        "The disk fills while train.py writes a checkpoint (simulated: the "
        "save raises TensorFlow's ResourceExhaustedError \"<file>; No space "
        "left on device\", the error it also raises out of memory)",
        "One line naming the file and the fix, not the out-of-memory "
        "advice; exit status 1; the last complete checkpoint stays the "
        "latest, and the failed save's partial shards are removed.",
        ("The disk is full writing", "free space or use a --workdir on a "
         "larger disk; the last complete checkpoint is kept."),
        "exit status 1",
    ),
    # ------------------------------------------------ multi-worker runs
    Case(
        "worker_never_comes", FAULT, "multi-worker",
        "Worker 0 of a 2-worker TF_CONFIG started alone "
        "(`--config.trainer.connect_timeout_s=10`)",
        "It waits in Python, logging the missing worker after 5 s and then "
        "every 30 s, and exits with status 1 after the timeout, in one line "
        "that names the missing address (default timeout: 600 s).",
        ("worker 1 (127.0.0.1:", "did not come up within 10 s "
         "(--config.trainer.connect_timeout_s)",
         "raise --config.trainer.connect_timeout_s"),
        "exit status 1",
    ),
    Case(
        "sigterm_while_waiting", FAULT, "multi-worker",
        "SIGTERM to a worker that waits for the others (what `docker stop` "
        "or Kubernetes sends)",
        "Ends at once, with status 143 (128 + SIGTERM) and one line; there "
        "is nothing to save yet.",
        ("SIGTERM while waiting for the workers of TF_CONFIG",
         "stopped before training started, nothing to save"),
        "exit status 143",
    ),
    Case(
        "multiworker_sigterm", FAULT, "multi-worker",
        "SIGTERM to worker 1 of 2 during training",
        "Every worker saves at the same step (TensorFlow's "
        "PreemptionCheckpointHandler) and exits with status 42; the same "
        "command on both resumes from that checkpoint, and the workers end "
        "with identical weights. Only the chief writes files.",
        ("Stopped at step", "every worker saved this step", "Run the same "
         "command on every worker to resume"),
        "exit status 42",
    ),
    Case(
        "worker_killed", FAULT, "multi-worker",
        "`kill -9` of worker 1 of 2 during training",
        "The other worker exits with status 1 within seconds, in one line "
        "that names the lost worker, the step and the newest complete "
        "checkpoint (no traceback). The same command on both workers "
        "resumes from that checkpoint, and a checkpoint folder that a "
        "non-chief worker left behind is removed at that start.",
        ("Lost worker 1 (127.0.0.1:", "Restart all 2 workers with the same "
         "command to resume from", "/checkpoints/ckpt-"),
        "exit status 1",
    ),
    Case(
        "multiworker_clean_finish", FAULT, "multi-worker",
        "The end of a complete 2-worker run",
        "Both workers exit with status 0 within seconds of the final "
        "metrics (the chief's export and training curves come before the "
        "workers part, and each waits for the others as its process "
        "exits), with no traceback and no 'tasks have crashed' line, also "
        "where the chief draws the curves of a finished run slowly after "
        "the parting; the non-chief worker wrote no checkpoint anywhere.",
        ("Final test metrics",),
    ),
    Case(
        "multiworker_finished_disagree", FAULT, "multi-worker",
        "The same finished 2-worker run started again, where worker 1 "
        "cannot read that it finished (its read of metrics.json fails)",
        "The workers vote on what they read before any acts on it: every "
        "worker exits with status 1 in the same one line, saying how many "
        "found the run finished, instead of one worker training alone "
        "while the other leaves. A worker whose read or check raises (the "
        "checkpoint list; the workdir not writable there) is counted in the "
        "same vote, after which every worker stops in one line naming how "
        "many could not read the run (that worker's line also says why).",
        ("The workers read the run in", "1 of 2 found it finished",
         "run the same command on every worker again"),
        "exit status 1",
    ),
    Case(
        "multiworker_tfds_prepare", FAULT, "multi-worker",
        "Two workers start on a TFDS data set that is not prepared yet in "
        "the data directory they share (config.input.download)",
        "Worker 0 alone downloads and prepares it while the other waits "
        "for its word through TensorFlow's coordination service (logged "
        "after 5 s, then every 30 s); the other then reads it, and both "
        "finish the run. Two workers preparing one folder at once would "
        "both fail.",
        ("TFDS downloads and prepares it (config.input.download)",),
    ),
    Case(
        "multiworker_tfds_chief_fails", FAULT, "multi-worker",
        "Worker 0 cannot download the TFDS data set that both workers wait "
        "for",
        "Worker 0 stops with the reason; the waiting worker stops with the "
        "same reason, naming worker 0, in one line (status 1).",
        ("The chief (worker 0 (127.0.0.1:", "could not prepare dtd:"),
        "exit status 1",
    ),
    Case(
        "multiworker_evaluate_prepare", FAULT, "multi-worker",
        "keras-vit-evaluate on two workers, on a TFDS data set not prepared "
        "yet: `--mode=eval` in a shared data directory, and `--mode=fewshot` "
        "whose download fails",
        "Evaluation downloads and prepares it on worker 0 alone (one "
        "download), and both workers score it. A few-shot run skips the "
        "set that worker 0 cannot prepare on both workers alike (a VTAB-1k "
        "run likewise, tested in one process); with no set left, each ends "
        "with status 1, the other worker naming worker 0.",
        ("no few-shot data set produced a result (dtd: The chief (worker 0 "
         "(127.0.0.1:",),
        "exit status 1",
    ),
    Case(
        "multiworker_tfds_chief_lost", FAULT, "multi-worker",
        "`kill -9` of worker 0 while it downloads the data set the other "
        "worker waits for",
        "The waiting worker stops (the test allows it a minute) with one "
        "line naming worker 0 and what to do (status 1).",
        ("The chief (worker 0 (127.0.0.1:", "stopped while it prepared "
         "dtd", "run the same command on every worker again"),
        "exit status 1",
    ),
    Case(
        "multiworker_chief_fails_at_end", FAULT, "multi-worker",
        "The chief fails after the final evaluation, before the run is "
        "finished (its export, or metrics.json, on a full disk)",
        "The chief stops with its own line, and every other worker with "
        "one line (status 1) saying that the run is not finished. Before, "
        "they said their work was complete and exited with status 0, so "
        "a scheduler restarted the chief alone, which then waited for "
        "them.",
        ("The chief left before it finished the run",
         "run the same command on every worker again to finish it."),
        "exit status 1",
    ),
    Case(
        "multiworker_other_settings", FAULT, "multi-worker",
        "The workers of a cluster run with other settings: another "
        "--config.schedule.lr on one, or copies of an image folder of "
        "other sizes under a run counted in epochs (each counts its steps "
        "from its own copy)",
        "Every worker stops alike before its first step (status 1), with "
        "one line naming the config sections that differ. Before, they "
        "trained other weights into one checkpoint without a word, failed "
        "inside TensorFlow, or waited forever.",
        ("workers run with other settings: their --config.schedule settings "
         "differ",
         "run the same command, with the same data, on every worker."),
        "exit status 1",
    ),
    Case(
        "multiworker_folder_not_shared", BAD_INPUT, "multi-worker",
        "Each worker with a folder of its own under the workdir they name "
        "(a local disk on every host), for keras-vit-train and for "
        "keras-vit-evaluate --mode=vtab's output folder",
        "Before any worker reads or writes the run, every worker stops "
        "(status 1) with the same line: which workers do not see the "
        "chief's files, and to give all of them one shared folder. "
        "(Resumed on worker 0 and started again on the others, the run "
        "would hang or train on from weights that differ.)",
        ("worker 1 (127.0.0.1:", "does not see the files the chief (worker "
         "0 (127.0.0.1:", "give all workers one shared folder (e.g. gs://"),
        "exit status 1",
    ),
    # ---------------------------------------------------------- bad data
    Case(
        "corrupt_image", BAD_INPUT, "data",
        "A .jpg file of random bytes in an image folder",
        "A clear error naming the file and the decoder's reason.",
        ("Cannot decode 3 image file(s)", "bad.jpg",
         "Unknown image file format", "set config.input.skip_bad_images=True"),
        "UsageError",
    ),
    Case(
        "unreadable_folder", BAD_INPUT, "data",
        "A sub-folder of images that cannot be listed (no read permission), "
        "in a folder given to keras-vit-predict or keras-vit-analysis, or "
        "in a training image folder",
        "One line naming the folder and the fix (its images were left out "
        "unsaid, with exit status 0).",
        ("cannot be listed", "give the user running this read and search "
         "permission on it"),
        "exit status 1",
    ),
    Case(
        "truncated_image", BAD_INPUT, "data",
        "A PNG cut off half-way",
        "The same error, naming the file.",
        ("truncated.png", "Remove or replace these files"),
        "UsageError",
    ),
    Case(
        "empty_image_file", BAD_INPUT, "data",
        "A zero-byte .png",
        "The same error, naming the file as empty.",
        ("empty.png", "Empty image"),
        "UsageError",
    ),
    Case(
        "skip_bad_images", BAD_INPUT, "data",
        "The same three files with `config.input.skip_bad_images=True`",
        "They are left out, named in the log and counted there and in "
        "metrics.json (`skipped_images`, per split; `--mode=eval`'s "
        "results too); training runs on the readable images.",
        ("Skipping 3 unreadable image file(s) of split 'train'",),
    ),
    Case(
        "bad_image_in_eval_split", BAD_INPUT, "data",
        "An undecodable file in the folder's val/ split, which the run "
        "evaluates on after each epoch",
        "Found at start-up, before any step: one line naming the file and "
        "the fix (with `skip_bad_images`, left out and named in the log "
        "once), not a failure at the first evaluation an epoch later. A "
        "workdir the run made is removed again, with the parents made for "
        "it (one holding a file is "
        "kept).",
        ("Cannot decode 1 image file(s) of image folder",
         "/val/a/bad.jpg", "config.input.skip_bad_images=True"),
        "UsageError",
    ),
    Case(
        "grayscale_png", BAD_INPUT, "data",
        "Grayscale PNG",
        "Works: three equal channels, exactly the file's values.",
    ),
    Case(
        "rgba_png", BAD_INPUT, "data",
        "RGBA PNG",
        "Works: alpha dropped, RGB exactly the file's values.",
    ),
    Case(
        "png_16bit", BAD_INPUT, "data",
        "16-bit PNG",
        "Works: each value v becomes v // 256 (8-bit), on every channel.",
    ),
    Case(
        "cmyk_jpeg", BAD_INPUT, "data",
        "CMYK JPEG",
        "Works: converted to RGB, within 2 levels of (255 - C)(255 - K) / "
        "255 on flat colour patches.",
    ),
    Case(
        "tiny_image", BAD_INPUT, "data",
        "Images smaller than a patch (3 x 2 pixels; patch 8)",
        "Works: resized (bilinear) to the model's input size, equal to "
        "`tf.image.resize` of its pixels; such images also train in the "
        "skip_bad_images run.",
    ),
    Case(
        "non_image_files", BAD_INPUT, "data",
        "Non-image files in class folders (notes.txt, .DS_Store, IMG_2 "
        "without an extension), hidden folders (.thumbnails/) and macOS's "
        "._IMG_1.jpg companions",
        "Ignored: only .jpg, .jpeg, .jpe, .jfif, .png, .gif, .bmp and "
        ".webp files are read, and no hidden file or folder is an image, a "
        "class or a split; one warning counts the other files by extension "
        "(a phone's .heic photos do not vanish unsaid).",
        ("1 extensionless file, 1 .heic file, 2 .txt files not read",),
    ),
    Case(
        "stray_image_beside_class_folders", BAD_INPUT, "data",
        "An image directly in train/ beside its class folders "
        "(train/IMG_1234.jpg)",
        "The folder is still read as <split>/<class>/ (its top folders are "
        "named as splits), and the log says which images are in no class "
        "folder and are not read.",
        ("are in no class folder (<split>/<class>/) and are not read",),
    ),
    Case(
        "unreadable_entry_in_class_folder", BAD_INPUT, "data",
        "A broken symbolic link, a folder named like an image (burst.jpg/), "
        "a BMP with a colour table (8 bits per pixel, which "
        "TensorFlow's decoder reads as grey colour indices), a 16-bit BMP "
        "(which it refuses as 2 channels) and an animated "
        "WebP (which TensorFlow's decoder reads by corrupting the process's "
        "memory) in a class folder",
        "The same one-line error as for a corrupt file, naming each and "
        "why; with config.input.skip_bad_images they are skipped and named.",
        ("Cannot decode 5 image file(s)", "No such file or directory",
         "burst.jpg", "A BMP with a colour table (8 bits per pixel or "
         "fewer), or of 16 bits per pixel", "Save the image as PNG or JPEG",
         "An animated WebP"),
        "UsageError",
    ),
    Case(
        "class_without_training_images", BAD_INPUT, "data",
        "A class folder in val/ with no counterpart in train/ (val/dogs/ "
        "misspelt beside train/dog/), or a folder of one class",
        "A clear error before training that names the class, or says that "
        "a classifier needs two classes (an evaluation may still read "
        "such a folder).",
        ("class dogs has images in split val but none in split train",
         "rename the folder to the class it belongs to"),
        "UsageError",
    ),
    Case(
        "num_classes_not_the_folders", BAD_INPUT, "data",
        "config.model.num_classes set to another count than the image "
        "folder's class folders",
        "A clear error before the model is built, naming both counts and "
        "the classes (a head of another width trained without a word, and "
        "the run could not then be evaluated on its own folder).",
        ("config.model.num_classes=5, but the image folder",
         "has 2 class folders (a, b)", "leave num_classes out"),
        "UsageError",
    ),
    Case(
        "class_all_unreadable_when_skipping", BAD_INPUT, "data",
        "With config.input.skip_bad_images, every image of one class "
        "unreadable",
        "A clear error naming the class (as for an empty class folder), "
        "not a model with a class it never trains.",
        ("Every image of class c in split 'train'", "is unreadable"),
        "UsageError",
    ),
    Case(
        "non_utf8_file_name", BAD_INPUT, "data",
        "A file name that is not UTF-8 in an image folder (from an old "
        "archive)",
        "One line naming the folder and the name's bytes, and a way to "
        "rename it.",
        ("is not UTF-8", "convmv"),
        "UsageError",
    ),
    Case(
        "empty_class_folder", BAD_INPUT, "data",
        "A class folder with no images",
        "A clear error at start-up naming the folder.",
        ("has no images", "add images or remove the folder"),
        "UsageError",
    ),
    Case(
        "missing_split", BAD_INPUT, "data",
        "An eval split that does not exist (image folder without test/)",
        "A clear error at start-up, before any training.",
        ("config.evals.test.split='test'", "has no split 'test'",
         "set it to an existing split",
         "a slice of one the training does not read"),
        "UsageError",
    ),
    Case(
        "eval_split_overlaps_train", BAD_INPUT, "data",
        "An evaluation split that shares examples with the training split "
        "(`train_split='train'` evaluated on `'train[90%:]'`)",
        "A warning at start-up naming both fields and the fix; the run goes "
        "on (evaluating on training images can be meant).",
        ("config.evals.test.split='train[90%:]' shares examples with "
         "config.input.train_split='train'",
         "measured partly on images the model learns from",
         "Give them slices that do not meet"),
    ),
    Case(
        "labels_out_of_range", BAD_INPUT, "data",
        "More classes in the data than `config.model.num_classes` (10 digit "
        "classes, num_classes=5)",
        "A clear error instead of a silently wrong loss.",
        ("Label out of range", "config.model.num_classes=5",
         "Set config.model.num_classes to the number of classes in the data"),
        "UsageError",
    ),
    Case(
        "unknown_dataset", BAD_INPUT, "data",
        "A dataset name that does not exist",
        "A clear error.",
        ("Unknown dataset 'digitz'", "use 'digits', 'folder' or a TFDS "
         "name"),
        "UsageError",
    ),
    Case(
        "dataset_path_as_name", BAD_INPUT, "data",
        "An image folder named as a data set, `--dataset=folder:PATH` "
        "(the form of `--config=folder:PATH`), in keras-vit-evaluate or a "
        "run config",
        "One line naming `--dataset=folder --data_dir=PATH`, before any "
        "data is read; a name TFDS cannot parse is named in one line, not "
        "TFDS's traceback.",
        ("dataset 'folder:", "--dataset=folder --data_dir="),
        "UsageError",
    ),
    Case(
        "tfds_download_offline", FAULT, "data",
        "A TFDS data set to download whose server does not answer (no "
        "network)",
        "While TFDS tries again (about 3.5 minutes), one line per host "
        "says so and how to stop, not a warning per try; then one line "
        "names the host and what to do without network. No workdir is "
        "left. Ctrl-C during the tries ends the command at once (exit "
        "130), not when TFDS's download threads give up.",
        ("cannot reach 127.0.0.1 (Connection refused)", "Ctrl-C stops",
         "cannot download from 127.0.0.1 (Connection refused)",
         "`tfds build dtd --data_dir=DIR`"),
    ),
    Case(
        "bad_class_names_file", BAD_INPUT, "CLI",
        "A --class_names_file that does not exist, is a folder, is not "
        "UTF-8 text, holds no name or has a blank line between names "
        "(keras-vit-predict, keras-vit-export)",
        "One line naming the file and what is wrong with it (a blank line "
        "by its number: left out, it would shift every later name), before "
        "the model is read; nothing is written.",
        ("does not exist.", "cannot be read (", "is not UTF-8 text",
         "holds no class name", "line 2 is blank"),
        "UsageError",
    ),
    Case(
        "missing_data_dir", BAD_INPUT, "data",
        "`dataset='folder'` with a data_dir that does not exist",
        "A clear error.",
        ("does not exist", "set config.input.data_dir"),
        "UsageError",
    ),
    # -------------------------------------------------------- bad config
    Case(
        "image_not_divisible", BAD_INPUT, "config",
        "image_size 30 with patch size 8",
        "A clear error with a size that works.",
        ("is not divisible by patch size 8", "use a multiple of 8"),
        "UsageError",
    ),
    Case(
        "unknown_variant", BAD_INPUT, "config",
        "Unknown variant 'B/15'",
        "A clear error listing the variants.",
        ("Unknown variant 'B/15'", "Known variants:"),
        "UsageError",
    ),
    Case(
        "resume_other_optimizer", BAD_INPUT, "training",
        "The same workdir resumed with another optimizer "
        "(`--config.optimizer.name=sgd` on an adamw run's checkpoints)",
        "One line before anything is restored or written, naming the field "
        "and the three ways on; the checkpoints are left as they were.",
        ("holds checkpoints of another optimizer state",
         '--config.optimizer.name: "adamw" in the workdir, "sgd" asked',
         "Resume with the run's own optimizer"),
        "TrainingError",
    ),
    Case(
        "resume_other_input", BAD_INPUT, "training",
        "A workdir whose checkpoints hold the data order resumed with other "
        "training data (`--config.input.batch_size=8` on a batch-16 run)",
        "One line before anything is restored or written, naming the field "
        "and the way on (the data order drawn anew); it used to fail on the "
        "first batch with TensorFlow's traceback, or (another subset of the "
        "data) to read the old data while config.json named the new.",
        ("holds checkpoints of the data order of other training data",
         "config.input.batch_size: 16 in the workdir, 8 asked",
         "--config.checkpoints.iterator=False"),
        "TrainingError",
    ),
    Case(
        "resume_other_start_model", BAD_INPUT, "training",
        "A workdir with checkpoints given `--model=SOURCE` that is not the "
        "model the run started from",
        "One line: the run resumes from its own checkpoints and would not "
        "read SOURCE (config.json would have named it); leave --model out, "
        "or use a new workdir.",
        ("resumes from its own checkpoints", "would not be read",
         "Leave --model out to resume"),
        "TrainingError",
    ),
    Case(
        "unknown_model_size", BAD_INPUT, "CLI",
        "A model size that does not exist (`--model=Ti/17`, "
        "keras-vit-train)",
        "One line before anything is written (no workdir is made), with the "
        "closest sizes and every size.",
        ("Ti/17: no such size, file or folder", "Did you mean Ti/16",
         "The sizes are Ti/16, S/16"),
        "UsageError",
    ),
    Case(
        "misnamed_model_file", BAD_INPUT, "CLI",
        "A model file renamed on download: a released .npz saved as "
        "`weights.bin` (`--model=weights.bin`), a .keras file saved as "
        ".npz or with no suffix",
        "One line before anything is read by the wrong reader: what the "
        "file holds, by its content, and the suffix to rename it to.",
        ("holds numpy arrays (an .npz), but its name says otherwise",
         "rename it to end in .npz"),
        "UsageError",
    ),
    Case(
        "config_typo", BAD_INPUT, "CLI",
        "A misspelt nested config field (`--config.model.hiden_size=64`)",
        "train.py stops before doing anything (the config is locked), with "
        "one line naming the field and the suggestion.",
        ("unknown config field 'hiden_size'",
         'Did you mean "hidden_size" instead of "hiden_size"?'),
        "SystemExit",
    ),
    Case(
        "zero_batch", BAD_INPUT, "config",
        "batch_size 0",
        "A clear error.",
        ("config.input.batch_size=0 must be > 0",),
        "UsageError",
    ),
    Case(
        "negative_batch", BAD_INPUT, "config",
        "batch_size -8",
        "A clear error.",
        ("config.input.batch_size=-8 must be > 0",),
        "UsageError",
    ),
    Case(
        "batch_not_divisible", BAD_INPUT, "config",
        "batch_size 15 on 2 replicas",
        "A clear error with the multiple to use.",
        ("config.input.batch_size=15 does not split among 2 replica(s)",
         "use a multiple of 2"),
        "UsageError",
    ),
    Case(
        "unknown_optimizer", BAD_INPUT, "config",
        "`optimizer.name='rmsprop'`",
        "A clear error listing the optimizers.",
        ("config.optimizer.name='rmsprop': use one of 'sgd', 'adam', "
         "'adamw', 'lamb'.",),
        "UsageError",
    ),
    Case(
        "unknown_loss", BAD_INPUT, "config",
        "`loss='hinge'`",
        "A clear error listing the losses.",
        ("config.objective.loss='hinge': use one of 'softmax_xent', "
         "'sigmoid_xent'.",),
        "UsageError",
    ),
    Case(
        "zero_total_steps", BAD_INPUT, "config",
        "total_steps 0 without epochs",
        "A clear error naming both fields.",
        ("config.trainer.total_steps is 0", "epochs is 0.0",
         "set one of them above 0"),
        "UsageError",
    ),
    Case(
        "resize_smaller_than_crop", BAD_INPUT, "config",
        "pp.resize_size 24 below image_size 32",
        "A clear error with the fix.",
        ("config.input.pp.resize_size=24 is smaller than the image size 32",
         "set config.input.pp.resize_size to at least 32"),
        "UsageError",
    ),
    # ----------------------------------------------------------- the CLI
    Case(
        "missing_workdir", BAD_INPUT, "CLI",
        "train.py without --workdir",
        "absl stops at flag parsing.",
        ("--workdir is required (flags: --help)",),
        "exit status 1",
    ),
    Case(
        "unknown_strategy", BAD_INPUT, "CLI",
        "`--strategy=gpu`",
        "absl stops at flag parsing, listing the strategies.",
        ("flag --strategy=gpu: value should be one of "
         "<auto|tpu|mirrored|multiworker|cpu>",),
        "exit status 1",
    ),
    Case(
        "unsupported_filesystem", BAD_INPUT, "CLI",
        "A workdir on a file system TensorFlow cannot reach (gs:// without "
        "GCS support, a mistyped scheme)",
        "A clear error naming the path and the fix.",
        ("Cannot use `workdir`", "pip install -e '.[gcs]'"),
        "UsageError",
    ),
    Case(
        "tpu_absent", BAD_INPUT, "CLI",
        "`--strategy=tpu` on a machine without a TPU, no `--tpu`",
        "One line naming the fixes, no traceback.",
        ("--strategy=tpu found no TPU", "run on a TPU VM (--tpu=local), "
         "pass --tpu=NAME", "--strategy=auto or --strategy=cpu"),
        "exit status 1",
    ),
    Case(
        "tpu_local_absent", BAD_INPUT, "CLI",
        "`--strategy=tpu --tpu=local` where no TPU is attached",
        "One line naming the fixes, no traceback.",
        ("Cannot initialise this machine's TPU (--tpu=local",
         "TensorFlow says:", "Found:", "--strategy=auto or --strategy=cpu"),
        "exit status 1",
    ),
    Case(
        "tpu_unreachable", BAD_INPUT, "CLI",
        "`--tpu=grpc://localhost:PORT` where nothing listens",
        "One line at once, before any connection attempt.",
        ("Cannot reach the TPU at --tpu=grpc://localhost:",
         "Check the address", "--strategy=auto or --strategy=cpu"),
        "exit status 1",
    ),
    Case(
        "tpu_name_off_cloud", BAD_INPUT, "CLI",
        "`--tpu=NAME` where the Google Cloud metadata server does not "
        "answer (off Google Cloud)",
        "One line naming the fixes, no traceback.",
        ("Cannot look up the Cloud TPU --tpu=my-tpu", "Run on a Google "
         "Cloud VM of the TPU's project and zone"),
        "exit status 1",
    ),
    Case(
        "bad_tf_config", BAD_INPUT, "CLI",
        "`--strategy=multiworker` with a TF_CONFIG that is not JSON",
        "One line showing the expected form, no traceback.",
        ("TF_CONFIG must be JSON like",),
        "exit status 1",
    ),
    Case(
        "port_in_use", BAD_INPUT, "CLI",
        "A worker whose TF_CONFIG port another process holds",
        "One line naming the port and the fix, no traceback.",
        ("of this worker (worker 0 (127.0.0.1:", "is in use",
         "give this worker a free port in TF_CONFIG on every worker"),
        "exit status 1",
    ),
    Case(
        "cluster_host_alone", BAD_INPUT, "CLI",
        "A worker of a 2-worker TF_CONFIG (as Vertex AI or a TFJob sets it "
        "on every host) started with `--strategy=auto`",
        "One line naming `--strategy=multiworker`, no traceback, nothing "
        "written; it used to train alone and write the shared workdir as "
        "if it were the chief.",
        ("TF_CONFIG names a cluster of 2 tasks, this one its worker",
         "pass --strategy=multiworker"),
        "exit status 1",
    ),
    # ---------------------------------------------------- checkpoint files
    Case(
        "truncated_npz", BAD_INPUT, "checkpoint",
        "A truncated .npz checkpoint",
        "A clear error.",
        ("truncated or corrupt .npz archive", "Download or copy the file "
         "again"),
        "UsageError",
    ),
    Case(
        "pickled_npz", BAD_INPUT, "checkpoint",
        "An .npz holding pickled Python objects",
        "Refused without unpickling (allow_pickle=False).",
        ("holds pickled Python objects, which are refused",),
        "UsageError",
    ),
    Case(
        "npz_other_variant", BAD_INPUT, "checkpoint",
        "An .npz of another variant (width 48 into width 32)",
        "A clear error listing the mismatches and the architecture the "
        "file implies; the model is left unchanged.",
        ("does not fit the model", "Pass `strict`=False"),
        "UsageError",
    ),
    Case(
        "nonfinite_weights", BAD_INPUT, "checkpoint",
        "A checkpoint whose weights hold NaN or an infinity (saved from a "
        "run that diverged, or damaged): an .npz, a hub folder or a .keras "
        "file, given to predict, evaluate, export, convert or fine-tuning",
        "`UsageError` when the weights load, naming the array and the count, "
        "before any image is scored or any file written (it used to predict "
        "NaN for every image and evaluate to chance).",
        ("holds 1 NaN or infinite value(s)", "Use another checkpoint"),
        "UsageError",
    ),
    Case(
        "nonfinite_activations", BAD_INPUT, "checkpoint",
        "A model whose weights are finite but whose activations overflow "
        "(weights near float32's limit), probed or evaluated",
        "The few-shot probe stops in one line before anything is written "
        "(its NaN features made every prediction class 0, scored as that "
        "class's share); `--mode=eval` counts each image of NaN scores as "
        "wrong and writes the NaN loss as null.",
        ("features that are not finite (NaN or inf)",
         "a linear probe on them would measure nothing"),
        "UsageError",
    ),
    Case(
        "deep_pickle", BAD_INPUT, "checkpoint",
        "A pytorch_model.bin whose pickle nests tuples 10,000 deep as a dict "
        "key (CPython crashes hashing it)",
        "Refused by the opcode pre-scan before anything is unpickled, with "
        "or without PyTorch; the process never crashes (the fuzz test of "
        "tests/test_torch_pickle.py runs every kind of hostile file in a "
        "child process).",
        ("its pickle nests containers more than 32 deep",),
        "UsageError",
    ),
    Case(
        "inflating_bin", BAD_INPUT, "checkpoint",
        "A pytorch_model.bin whose storage member inflates to 32 MiB where "
        "the pickle declares 4 floats",
        "Refused from the zip's directory before a byte is inflated.",
        ("holds 33554432 bytes, but the pickle declares 4 FloatStorage",),
        "UsageError",
    ),
    Case(
        "zero_stride_bin", BAD_INPUT, "checkpoint",
        "A 1 KB pytorch_model.bin with 8 zero-stride tensors of 67 million "
        "elements each",
        "Refused when the arrays made from it would pass 2 x its storage "
        "bytes + 64 MiB (in total, not per tensor).",
        ("views that repeat storage elements; refusing the file",),
        "UsageError",
    ),
    Case(
        "index_escape", BAD_INPUT, "checkpoint",
        "A model.safetensors.index.json whose weight_map names "
        "../other/model.safetensors (a valid model)",
        "Refused: shards must lie in the model's folder (links of the "
        "Hugging Face cache into its own blobs/ excepted).",
        ("outside the model's folder",),
        "UsageError",
    ),
    Case(
        "index_no_weight_map", BAD_INPUT, "checkpoint",
        "A model.safetensors.index.json without weight_map",
        "One line naming the file.",
        ("has no weight_map",),
        "UsageError",
    ),
    Case(
        "config_list", BAD_INPUT, "checkpoint",
        "A hub model's config.json that is a JSON list",
        "One line naming the file.",
        ("holds a JSON list, not an object of named fields",),
        "UsageError",
    ),
    Case(
        "npy_huge_shape", BAD_INPUT, "checkpoint",
        "An .npz member whose .npy header declares a shape of 2^39 floats "
        "over 64 bytes",
        "Refused from the header before any array is allocated.",
        ("declares shape (524288, 1048576) of float32",
         "the file is corrupt or crafted"),
        "UsageError",
    ),
    Case(
        "empty_axis_array", BAD_INPUT, "checkpoint",
        "An array that declares an axis of length zero beside a huge one "
        "(shape (0, 2^27): no bytes, so the file's size bounds nothing), "
        "in an .npz or a hub folder's safetensors file",
        "Refused from its header, naming the array and its shape, before "
        "a model is built from the widths the shapes imply (before, the "
        "model was built at those widths before any check ran).",
        ("holds no numbers; no parameter of a model is empty",),
        "UsageError",
    ),
    Case(
        "keras_lambda", BAD_INPUT, "checkpoint",
        "A .keras file holding a Lambda layer",
        "Loaded in Keras's safe mode: one line, no code from the file runs.",
        ("holds Python code (a Lambda layer's function)",),
        "UsageError",
    ),
    Case(
        "hf_dotdot_revision", BAD_INPUT, "checkpoint",
        "`hf://ORG/NAME@..`",
        "One line before the Hugging Face cache is touched.",
        ("holds no '..' and starts with no '.'",),
        "UsageError",
    ),
    Case(
        "link_out_of_folder", BAD_INPUT, "checkpoint",
        "A model folder whose model.safetensors (or config.json, or "
        "preprocessor_config.json) is a symbolic link to a valid model's "
        "file elsewhere",
        "Refused before the file is read: every file a loader opens "
        "resolves inside the model's folder; in a Hugging Face cache only "
        "a snapshot's links into its own repository's blobs/ are followed.",
        ("is a link to", "outside the model's folder"),
        "UsageError",
    ),
    Case(
        "hf_refs_escape", BAD_INPUT, "checkpoint",
        "`hf://ORG/NAME` whose cached refs/main holds "
        "`../../models--k--l/snapshots/cafe` (another repository's valid "
        "model)",
        "Refused: refs/ must name a snapshot of the repository itself.",
        ("not a snapshot of", "its refs/ file names a path outside"),
        "UsageError",
    ),
    Case(
        "keras_config_bomb", BAD_INPUT, "checkpoint",
        "A .keras file whose config.json inflates to 128 MiB",
        "Refused from the zip's directory before Keras inflates a byte "
        "(every .keras, .npz and pytorch_model.bin: JSON members at most "
        "32 MiB, all members at most 64 MiB plus twice the file).",
        ("config.json declares 134217737 bytes",
         "more than the 33554432 a model's JSON file may hold"),
        "UsageError",
    ),
    Case(
        "npz_member_bomb", BAD_INPUT, "checkpoint",
        "An .npz of a valid model with an extra array member inflating to "
        "128 MiB from a 0.3 MB file",
        "Refused before any member is inflated.",
        ("refused before inflating", "64 MiB plus twice the file's"),
        "UsageError",
    ),
    Case(
        "keras_user_model", BAD_INPUT, "checkpoint",
        "A .keras functional model of keras_vit's layers plus a Softmax on "
        "the logits",
        "`load_model` gives it back as Keras saved it (all its layers, the "
        "same outputs), with a warning saying so; what needs a ViT (the "
        "commands, fine-tuning, features, attention, another resolution) "
        "refuses it naming the layer. Only a model that is exactly a ViT "
        "saved before the VisionTransformer class is rebuilt as one.",
        ("its layer 'probs' (Softmax) comes after a ViT's last layer",
         "never rebuilt as one"),
        "UsageError",
    ),
    Case(
        "keras_not_a_model", BAD_INPUT, "checkpoint",
        "A .keras file whose top-level object is a layer (Dense)",
        "One line, no traceback.",
        ("holds a Dense, not a model",),
        "UsageError",
    ),
    Case(
        "keras_truncated", BAD_INPUT, "checkpoint",
        "A .keras file cut off half-way",
        "One line naming it (not Keras's 'File not found').",
        ("truncated or corrupt .keras archive", "Save or copy the file "
         "again"),
        "UsageError",
    ),
    Case(
        "keras_declares_huge_model", BAD_INPUT, "checkpoint",
        "A .keras file of a few kB whose config.json declares a ViT of "
        "billions of parameters, a position table of 2^24 rows (an image "
        "32,768 pixels wide) or a Dense layer of 4 billion",
        "Refused from config.json and the weights member's size before "
        "Keras builds the model (which allocates every declared weight): "
        "the declared parameters, at one byte each, must fit the weights.",
        ("parameters, more than its weights", "refused before Keras "
         "builds it"),
        "UsageError",
    ),
    Case(
        "npz_declares_huge_model", BAD_INPUT, "checkpoint",
        "An .npz of a few kB whose arrays' shapes declare a ViT of "
        "billions of parameters (width 8192 from the patch kernel, MLP "
        "65536, ten blocks named by one-value arrays; a 65536 x 65536 "
        "head from two one-row kernels; a million ResNet units from one "
        "key name, or a ResNet of width 32768), a big_vision stacked "
        "array splitting into a million blocks, or a position table of "
        "20,000 rows",
        "Refused from the shapes before the model is built (which "
        "allocates every declared weight): the parameters the shapes "
        "declare must be held by the file's arrays.",
        ("declares a", "refused before the model is built",
         "corrupt or crafted"),
        "UsageError",
    ),
    Case(
        "npz_complex", BAD_INPUT, "checkpoint",
        "An .npz whose head/bias is complex64 (or a void dtype)",
        "Refused from the header: a checkpoint holds real numbers only "
        "(no imaginary part dropped).",
        ("has dtype <c8 (complex64), not a real number",),
        "UsageError",
    ),
    Case(
        "timm_qkv_bias_stray", BAD_INPUT, "checkpoint",
        "A timm folder whose model_args say qkv_bias=False beside stored "
        "query/key/value biases",
        "Refused, as timm's strict load refuses it (a transformers folder "
        "with qkv_bias false loads without the biases, as transformers "
        "reads it).",
        ("timm builds no query/key/value bias", "its strict load refuses "
         "weights with blocks.0.attn.qkv.bias"),
        "UsageError",
    ),
    Case(
        "timm_zero_std", BAD_INPUT, "checkpoint",
        "A timm folder whose pretrained_cfg std is [0.2, 0, 0.2]",
        "Refused (it loaded as infinite weights and NaN logits).",
        ("has a zero: timm would divide the pixels by it",),
        "UsageError",
    ),
    Case(
        "hf_no_class_token", BAD_INPUT, "checkpoint",
        "A transformers-named folder whose weights lack "
        "vit.embeddings.cls_token (a ViT without a class token, one "
        "position row per patch)",
        "Refused by name, as transformers refuses it (its ViTEmbeddings "
        "always has a class token); not read as average pooling.",
        ("lack vit.embeddings.cls_token", "transformers' ViTEmbeddings "
         "always has a class token"),
        "UsageError",
    ),
    Case(
        "timm_unregistered_architecture", BAD_INPUT, "checkpoint",
        "A timm folder whose config.json names an architecture timm does "
        "not register (vit_large_patch16_newthing_224), with no num_heads "
        "in model_args",
        "Refused, as timm's create_model refuses it ('Unknown model'), "
        "naming the registry's timm version and the fix; nothing (the head "
        "count, the pooling) is guessed from the name.",
        ("vision_transformer / deit architectures of timm 1.0.31",
         "set architecture to a registered name"),
        "UsageError",
    ),
    Case(
        "timm_unknown_model_arg", BAD_INPUT, "checkpoint",
        "A timm folder whose model_args hold a key timm's VisionTransformer"
        " does not take (attn_pool_num_heads)",
        "Refused by name (timm raises TypeError building the model), not "
        "ignored.",
        ("model_args has 'attn_pool_num_heads', which timm 1.0.31's "
         "VisionTransformer does not take", "remove 'attn_pool_num_heads'"),
        "UsageError",
    ),
    Case(
        "timm_unknown_pretrained_cfg_field", BAD_INPUT, "checkpoint",
        "A timm folder whose pretrained_cfg holds a key timm's "
        "PretrainedCfg lacks (crop_size)",
        "Refused by name (timm's factory raises TypeError building its "
        "PretrainedCfg), not ignored.",
        ("pretrained_cfg has 'crop_size', not a field of timm 1.0.31's "
         "PretrainedCfg",),
        "UsageError",
    ),
    Case(
        "hf_processor_bad_size", BAD_INPUT, "checkpoint",
        "A transformers folder whose preprocessor_config.json size is "
        "{\"width\": 224} (no key set transformers reads)",
        "Refused by name, with the forms transformers reads.",
        ("size={'width': 224}: transformers reads", "fix or remove the "
         "field"),
        "UsageError",
    ),
    Case(
        "hf_processor_resize_differs", BAD_INPUT, "checkpoint",
        "A transformers folder whose preprocessor_config.json resizes to "
        "36 x 40 before its central 32 x 32 crop (a resize that is not "
        "square)",
        "Loads; keras-vit-predict and -evaluate resize a photo to the input"
        " directly, and one warning line names what transformers does "
        "instead and --resize_size.",
        ("resizes to 36 x 40 before its central crop, which keras-vit "
         "cannot", "--resize_size=N resizes to N x N before the central "
         "crop"),
    ),
    # ------------------------------------------------------------ serving
    Case(
        "output_exists", BAD_INPUT, "export",
        "keras-vit-convert's `--output`, or keras-vit-export's LiteRT file "
        "(`<model_name>.tflite`, e.g. an int8 export after a float32 one "
        "of the same name), is already there",
        "UsageError before any model is loaded; the file is kept. "
        "`--overwrite` replaces it (written atomically). A SavedModel "
        "version is never replaced.",
        ("already exists: pass --overwrite to replace it, or choose "
         "another",),
        "UsageError",
    ),
    Case(
        "serve_garbage_bytes", BAD_INPUT, "export",
        "Serving request with bytes that are no image",
        "InvalidArgumentError from the SavedModel, naming the formats.",
        ("Unknown image file format. One of JPEG",),
        "InvalidArgumentError",
    ),
    Case(
        "serve_empty_string", BAD_INPUT, "export",
        "Serving request with an empty string",
        "InvalidArgumentError naming the problem and what to send.",
        ("Empty image: image_bytes holds a zero-length string",
         "Send the encoded image file"),
        "InvalidArgumentError",
    ),
    Case(
        "serve_base64_text", BAD_INPUT, "export",
        "Serving request with base64 text instead of the bytes",
        "InvalidArgumentError naming the REST b64 wrapping.",
        ("looks like base64 text", "Send the raw file bytes"),
        "InvalidArgumentError",
    ),
    Case(
        "serve_decompression_bomb", BAD_INPUT, "export",
        "Serving request with a PNG of a few kilobytes whose header declares "
        "20,000 x 20,000 pixels (some 6 GB once decoded), or an animated GIF "
        "of 2 MB whose 160 frames take 2.7 GB to read, alone or in a batch; "
        "the same limit holds for training and keras-vit-predict",
        "InvalidArgumentError from the header, before decoding: the memory "
        "is never taken.",
        ("declares more than 134,217,728 pixels", "Resize it first"),
        "InvalidArgumentError",
    ),
    Case(
        "unsupported_image_format", BAD_INPUT, "export",
        "An image in a format other than JPEG, PNG, GIF, BMP or WebP: a JPEG "
        "XL file (which TensorFlow's decoder reads, though no header check "
        "reads its size, so a few kilobytes may declare any number of "
        "pixels), in a serving request, alone or in a batch; training and "
        "keras-vit-predict read through the same check",
        "InvalidArgumentError from its first bytes, before any decoder "
        "reads it, naming the formats that are read (in a batch, by its "
        "index).",
        ("Unknown image file format. One of JPEG, PNG, GIF, BMP or WebP "
         "required", "JPEG XL", "save the image as PNG or JPEG"),
        "InvalidArgumentError",
    ),
    Case(
        "serve_request_pixel_budget", BAD_INPUT, "export",
        "A serving request of five images, each within the limit of one "
        "(11,000 x 11,000 pixels) but declaring 605 million pixels together",
        "InvalidArgumentError from the headers, before any image is "
        "decoded: the request is refused whole, naming the count and the "
        "total.",
        ("image_bytes: the 5 images of this request declare 605000000 "
         "pixels together", "Send fewer images a request, or smaller ones"),
        "InvalidArgumentError",
    ),
    Case(
        "export_resize_smaller_than_input", BAD_INPUT, "export",
        "`export_model(..., resize_size=8)` for a model of input 16 x 16",
        "UsageError before anything is written (no model folder is left).",
        ("resize_size 8 is smaller than the model's input 16x16",
         "give sides at least the input's"),
        "UsageError",
    ),
    Case(
        "blank_class_name", BAD_INPUT, "export",
        "keras-vit-export `--class_names=a,,c` (a blank name), for a "
        "SavedModel or `--format=litert`",
        "One line naming the name by its index, exit status 1, before "
        "anything is converted (a blank line of labels.txt would shift "
        "every later name when it is read).",
        ("class_names[1] = '': names must be str without newlines, and not "
         "blank",),
        "exit status 1",
    ),
    Case(
        "serve_wrong_dtype", BAD_INPUT, "export",
        "Serving request with floats where image bytes are expected",
        "InvalidArgumentError naming the expected type.",
        ("was expected to be a string tensor but is a float tensor",),
        "InvalidArgumentError",
    ),
    Case(
        "serve_wrong_rank", BAD_INPUT, "export",
        "Serving request with one string instead of a batch of them",
        "InvalidArgumentError naming the expected shape.",
        ("Shape of tensor image_bytes [] is not compatible with expected "
         "shape [?]",),
        "InvalidArgumentError",
    ),
    Case(
        "serve_pixels_out_of_range", BAD_INPUT, "export",
        "predict_images with normalised pixels (outside [0, 255])",
        "InvalidArgumentError saying not to normalise.",
        ("expects pixel values in [0, 255]", "Do not normalise the "
         "pixels"),
        "InvalidArgumentError",
    ),
    # ---------------------------------------------------------------- VTAB
    Case(
        "unknown_vtab_task", BAD_INPUT, "VTAB",
        "A VTAB task name that does not exist",
        "A clear error listing the tasks and groups.",
        ("Unknown VTAB task(s) 'cifar1000'", "Valid tasks:"),
        "UsageError",
    ),
    Case(
        "vtab_damaged_results", FAULT, "VTAB",
        "keras-vit-evaluate --mode=vtab into an output_dir whose "
        "results.jsonl has its last line cut short (a copy stopped "
        "mid-line), or a damaged line before it",
        "A last line cut short is left out with a warning naming the file "
        "and the line, and its task runs again; a damaged line before it "
        "(or a damaged recipe.json or backbone.json) is refused in one line "
        "naming the file and the fix, nothing run or rewritten (before, a "
        "JSONDecodeError traceback).",
        ("the last line (2) is cut short or damaged", "left out; its task "
         "runs again if selected", "line 2 is damaged", "mend it, or "
         "delete that line (its task then runs again), or pass another "
         "--output_dir"),
    ),
    Case(
        "vtab_other_weights", BAD_INPUT, "VTAB",
        "keras-vit-evaluate --mode=vtab --no_ema into an output_dir whose "
        "tasks were trained from the run's EMA weights (or the other way "
        "round)",
        "Refused: the backbone's stamp records the weights it was written "
        "from (before, the EMA backbone.npz was reused without a word and "
        "the two weight sets' tasks were averaged in one table); every "
        "results file records `use_ema`.",
        ("holds results of another pre-trained model (use_ema True, now "
         "False)", "use a new `output_dir`"),
        "UsageError",
    ),
    Case(
        "no_ema_without_ema", BAD_INPUT, "CLI",
        "--no_ema with a training run that kept no EMA weights "
        "(trainer.ema_decay 0)",
        "Refused in one line by every command that takes --no_ema, before "
        "the model loads (before, it was accepted: keras-vit-evaluate "
        "wrote a second result file, eval_..._noema.json, of the same "
        "weights).",
        ("kept no EMA weights (its trainer.ema_decay is 0)",
         "leave --no_ema out"),
        "UsageError",
    ),
    Case(
        "analysis_output_not_ours", BAD_INPUT, "analysis",
        "keras-vit-analysis --output_dir holding a file of one of its "
        "figures' names (or analysis.json) that no earlier analysis wrote",
        "Refused in one line before the model loads, the file kept (before, "
        "replaced without a word); an earlier analysis's figures are still "
        "replaced, known by its analysis.json or by their PNG's mark.",
        ("which no earlier keras-vit-analysis wrote there",
         "not replaced; move", "pass another --output_dir"),
        "UsageError",
    ),
    Case(
        "saved_model_variables_cut", FAULT, "export",
        "An exported SavedModel's variables file is cut short (an "
        "interrupted copy), and keras-vit-predict is given it",
        "One line naming the version and the fix (before, TensorFlow's "
        "IndexError traceback).",
        ("is not a readable SavedModel", "export the model again"),
    ),
    Case(
        "eval_unknown_split", BAD_INPUT, "CLI",
        "keras-vit-evaluate --mode=eval --split=nosplit (or a split TFDS "
        "cannot parse, --split='val|test')",
        "One line naming --split and the splits the data has, before the "
        "model is scored (it was a traceback from inside TFDS).",
        ("--split=nosplit cannot be used", "holds no split 'nosplit'",
         "(it has train, test)"),
        "exit status 1",
    ),
    Case(
        "eval_resize_below_image_size", BAD_INPUT, "config",
        "config.input.pp.eval_resize_size smaller than config.model."
        "image_size (a resize the central crop cannot be cut from), in "
        "training, few-shot or --mode=eval with --config",
        "One line naming both fields, before the model loads (it was "
        "TensorFlow's EnsureShape error from inside the input pipeline).",
        ("--config.input.pp.eval_resize_size=16 is smaller than "
         "--config.model.image_size=32",),
        "exit status 1",
    ),
    Case(
        "elongated_image_keep_aspect", BAD_INPUT, "data",
        "An image so elongated that resizing its shorter side keeping the "
        "aspect ratio makes more than 2**24 pixels (a 1 x 300 strip at a "
        "resize of 256), in keras-vit-predict, keras-vit-analysis, a "
        "served request or an export's warm-up images",
        "Refused before the resize allocates it (one line naming the file "
        "in keras-vit-predict, or with --skip_bad_images named and left "
        "out; the request's error in serving; a warm-up image named before "
        "the export writes anything, as TF Serving would fail to load the "
        "model on it), naming the fix.",
        ("too elongated to resize its shorter side keeping the aspect "
         "ratio", "crop it first, or resize both sides (--keep_aspect=false)"),
        "exit status 1",
    ),
    Case(
        "keep_aspect_without_resize", BAD_INPUT, "CLI",
        "`--keep_aspect` (resize the shorter side, keeping the aspect "
        "ratio) on keras-vit-evaluate --mode=eval or keras-vit-predict, "
        "for a model whose evaluation has no resize size and without "
        "--resize_size",
        "The central crop of the input's aspect ratio, then the resize "
        "to the input (keras-hub's image converter), in both commands; "
        "the evaluation's log says so. It was refused, so a keras-hub "
        "preset's crop could not be asked for by a flag.",
        ("the central crop of its aspect ratio, resized to it",),
    ),
    Case(
        "keras_hub_gap_over_class_token", BAD_INPUT, "checkpoint",
        "A keras-hub preset whose ViTImageClassifier pools by 'gap' over "
        "a backbone with a class token",
        "Refused by name: keras-hub averages the class token with the "
        "patches, which the ViT's GAP model (no class token) does not "
        "compute; not loaded as either pooling.",
        ("pooling 'gap' with a class token averages the class token with "
         "the patches",),
        "UsageError",
    ),
    Case(
        "keras_hub_quantized", BAD_INPUT, "checkpoint",
        "A keras-hub preset saved quantized (its dtype policy a "
        "DTypePolicyMap)",
        "Refused by name before any array is read (its int8 arrays and "
        "scales would load as float weights).",
        ("'DTypePolicyMap' (a quantized preset)",
         "only float presets are read"),
        "UsageError",
    ),
    Case(
        "keras_hub_h5_link", BAD_INPUT, "checkpoint",
        "A keras-hub preset whose model.weights.h5 holds an HDF5 external "
        "link (to /etc/passwd) or a soft link",
        "Refused by name before any array is read, as Keras's own loader "
        "refuses it; no file outside the preset is opened.",
        ("is a link; a weights file holds arrays only",),
        "UsageError",
    ),
    Case(
        "tfds_feature_not_an_image", BAD_INPUT, "data",
        "config.input.image_key names a TFDS feature that is no 8-bit "
        "image (eurosat/all's 13-band float32 `sentinel2`; a 16-bit or "
        "float Image; a video), or label_key one that is no class label "
        "(DTD's file_name)",
        "One line naming the feature, its type (and shape), and the image "
        "features or class labels the data set has (or that it has none), "
        "before any example is read. It was a traceback from inside the "
        "input pipeline (a float image in [0, 1] was read as if in "
        "[0, 255]), or an AttributeError for the label.",
        ("image_key='sentinel2' of eurosat/all is a float32 Tensor of "
         "shape (64, 64, 13), not an image keras_vit reads",
         "it reads uint8 images of 1 to 4 channels",
         "eurosat/all has none: use a data set with RGB images"),
        "exit status 1",
    ),
    Case(
        "analysis_attention_too_large", BAD_INPUT, "analysis",
        "keras-vit-analysis at an image size whose attention weights "
        "cannot fit in memory (every layer's weights of a batch are held "
        "together, and the tokens grow with the square of the side; "
        "262,145 tokens in the test), or at a batch size that cannot fit",
        "One line before the forward pass, giving the memory each image "
        "needs and what is free, and naming the largest --batch_size that "
        "fits; where not one image fits, naming --image_size, before any "
        "image is read. The process was killed by the kernel's "
        "out-of-memory killer without a word.",
        ("of memory is free: not one image fits",
         "Analyse at a smaller image size (--image_size=N"),
        "exit status 1",
    ),
    Case(
        "evaluation_out_of_memory", FAULT, "training",
        "A periodic evaluation of keras-vit-train runs out of memory "
        "between checkpoints (simulated: the evaluation raises "
        "TensorFlow's ResourceExhaustedError \"OOM when allocating tensor "
        "...\"); the fine-tuning recipes evaluate 512 images a batch",
        "The step is saved before the one line, which names the evaluator's "
        "config.evals.<name>.batch_size and says that the same command "
        "with it evaluates that step first; resumed so, the run goes on "
        "from that step. The steps since the last checkpoint were lost, "
        "and the line named config.input.batch_size.",
        ("Out of memory in the 'test' evaluation on test at step 3",
         "lower --config.evals.test.batch_size (", "evaluates step 3 first"),
        "exit status 1",
    ),
    Case(
        "flat_folder_val_never_read", BAD_INPUT, "data",
        "keras-vit-train on a folder of class folders alone (ImageNet-21k "
        "as its archive unpacks: <synset>/*.JPEG) with splits that all "
        "slice train, as the ImageNet-21k recipes' do "
        "(train[50000:], train[:50000])",
        "One line before any image is read: the 20% of each class held out "
        "as split val is never read, and the fix (the class folders into "
        "<root>/train/, or read val); a run begun earlier resumes, warned. "
        "The run trained on 80% of the images without a word.",
        ("has no split folders, so 20% of each class of two images or more "
         "is held out as its split val, which this run never reads",
         "move the class folders into"),
        "exit status 1",
    ),
    Case(
        "output_made_during_predict", FAULT, "CLI",
        "keras-vit-predict --output=answer.json without --overwrite, and "
        "another program writes answer.json while the model loads or the "
        "images are classified (after the check at the start)",
        "The file is kept as the other program wrote it, and one line "
        "names it and the fix; no temporary file is left (the answer is "
        "published with a hard link, which fails on an existing name). "
        "It was replaced.",
        ("already exists: pass --overwrite to replace it, or choose "
         "another --output",),
        "exit status 1",
    ),
    Case(
        "output_made_during_litert_export", FAULT, "CLI",
        "keras-vit-export --format=litert without --overwrite, and another "
        "program writes the .tflite or a file beside it while the model "
        "converts (after the check at the start); or an earlier export "
        "was killed after the files beside its .tflite",
        "The file is kept, one line names it and the fix, and nothing is "
        "left beside it; a killed export's record and class names (with "
        "no .tflite) are replaced by the next export. It was replaced; a "
        "killed export's record was refused as an existing file.",
        ("already exists: pass --overwrite to replace it, or choose "
         "another --model_name",),
        "exit status 1",
    ),
    Case(
        "output_made_during_convert", FAULT, "CLI",
        "keras-vit-convert --output=vit.keras without --overwrite, and "
        "another program writes vit.keras while the model loads",
        "The file is kept, one line names it and the fix, and no "
        "temporary file is left; with --overwrite the .keras replaces it. "
        "It was replaced.",
        ("already exists: pass --overwrite to replace it, or choose "
         "another --output",),
        "exit status 1",
    ),
]

CASES: Dict[str, Case] = {}
for _case in _CASES:
    if _case.id in CASES:
        raise ValueError(f"Duplicate reliability case {_case.id!r}.")
    CASES[_case.id] = _case


def covers(*case_ids: str) -> Callable:
    """Marks a test function as the proof of `case_ids`."""
    for case_id in case_ids:
        if case_id not in CASES:
            raise KeyError(f"No reliability case {case_id!r}.")

    def mark(fn):
        fn.reliability_cases = tuple(case_ids)
        return fn

    return mark


def check_says(case_id: str, text: str) -> None:
    """Asserts that every excerpt of the case appears verbatim in `text`."""
    missing = [s for s in CASES[case_id].says if s not in text]
    assert not missing, f"{case_id}: {missing} not in:\n{text[-3000:]}"


def check_error(case_id: str, error: BaseException) -> None:
    """Asserts the case's exception type and message excerpts."""
    case = CASES[case_id]
    assert type(error).__name__ == case.error, (
        f"{case_id}: got {type(error).__name__}: {error}"
    )
    check_says(case_id, str(error))
