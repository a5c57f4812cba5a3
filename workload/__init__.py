"""Traffic on a live testbed: DNN training and everything around it.

Processes in host namespaces and ping (netexec.py), iperf3 (iperf.py);
tensors tagged with the TaLB option over TCP (tensor_sender.py, with the
hosts' program; ids from snowflake.py and id_slots.py; `talb send`'s
receiver and sender: tensor_app.py); model profiles (models/), compute
and scaling (compute.py, scaling.py), the ByteScheduler (scheduler.py),
communication patterns (patterns/: parameter server, ring all-reduce);
background flows (background.py; background_only.py for `talb run --model
none`); faults (faults.py, forge.py, recovery.py); measurement
(measure.py, capture.py, run_metrics.py); and one run end to end
(experiment.py, `talb run`; its results file: run_record.py; the testbed
it uses: testbed_use.py). docs/workload.md.
"""
