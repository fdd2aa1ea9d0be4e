#!/bin/bash
# upstream llama-perplexity --kl-divergence, FA on, every cache type, against f16/f16 FA on
set -e
bin=/tmp/calib37/ppl-build/bin/llama-perplexity
m=/root/.cache/pyllama90a/models/SmolLM2-135M-Instruct.Q4_1.gguf
common="-m $m -c 512 -b 512 --chunks 2 -fa on -t 2"
$bin $common -f /tmp/calib37/text.txt -ctk f16 -ctv f16 --kl-divergence-base /tmp/calib37/base.kld > /tmp/calib37/kld-base.log 2>&1
for t in bf16 q8_0 q5_1 q5_0 q4_1 q4_0 iq4_nl; do
  $bin $common -ctk $t -ctv $t --kl-divergence-base /tmp/calib37/base.kld --kl-divergence > /tmp/calib37/kld-$t.log 2>&1
  echo "$t $(grep -E 'Mean +KLD' /tmp/calib37/kld-$t.log) | $(grep -E 'Same top p' /tmp/calib37/kld-$t.log)"
done
