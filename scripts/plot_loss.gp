# scripts/plot_loss.gp — loss curves of a training run: gnuplot -e "dir='runs/small'" scripts/plot_loss.gp
# Optional: -e "title='...'" (default: dir), a single-quoted string ('' for a quote).
# Reads <dir>/train.csv (step,loss,...) and <dir>/val.csv (step,val_loss,...); writes <dir>/loss.png.
set datafile separator ","
set terminal pngcairo size 900,540 noenhanced
set output dir."/loss.png"
if (!exists("title")) title = dir
set title "ctxlab training: ".title
set xlabel "optimizer step"
set ylabel "loss (nats / byte)"
set grid
set key top right
plot dir."/train.csv" using 1:2 every ::1 with lines lw 1 lc rgb "#7f9fbf" title "train", \
     dir."/val.csv" using 1:2 every ::1 with linespoints lw 2 pt 7 lc rgb "#c0392b" title "validation"
