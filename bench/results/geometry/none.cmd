/tmp/b/tessera train --model llama-mini --layers 8 --seq 128 --batch 8 --steps 600 --optimizer muon-pe --muon-lr 0.02 --lr 0.01 --warmup 30  --data /work/main/data/corpus.txt
