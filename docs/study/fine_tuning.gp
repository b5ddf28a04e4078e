set terminal pngcairo enhanced size 1000,550 font 'DejaVu Sans,11'
set output 'fine_tuning.png'
set encoding utf8
set border lw 1 lc rgb '#555555'
set grid lc rgb '#dddddd' lw 1
set key noopaque
set style line 1 lc rgb '#1f77b4' lw 2.5
set style line 2 lc rgb '#d62728' lw 2.5
set style line 3 lc rgb '#2ca02c' lw 2.5
set style line 4 lc rgb '#9467bd' lw 2.5
set style line 5 lc rgb '#ff7f0e' lw 2.5
set style line 6 lc rgb '#8c564b' lw 2.5
set palette defined (0 '#2166ac', 0.5 '#f7f7f7', 1 '#b2182b')
$r20 << EOD
25 1.91696
50 1.72303
75 1.6273
100 1.58153
EOD
$r21 << EOD
25 1.47809
50 1.46628
75 1.45406
100 1.44169
EOD
$r22 << EOD
25 1.886
50 1.68
75 1.58502
100 1.52277
EOD
$r23 << EOD
25 1.45153
50 1.42708
75 1.43041
100 1.4272
EOD
set title 'Fine-tuning at 4x: held-out loss at the fine-tune length'
set xlabel 'step'
set ylabel 'nats per character'
set key outside right
plot $r20 using 1:2 with lines lw 2 dt 1 lc rgb '#1f77b4' title 'rope-pi-ft-s1', $r21 using 1:2 with lines lw 2 dt 1 lc rgb '#d62728' title 'rope-yarn-ft-s1', $r22 using 1:2 with lines lw 2 dt 2 lc rgb '#1f77b4' title 'rope-pi-ft-s2', $r23 using 1:2 with lines lw 2 dt 2 lc rgb '#d62728' title 'rope-yarn-ft-s2'
unset output
set terminal svg enhanced dynamic background rgb 'white' size 1000,550 font 'DejaVu Sans,11'
set output 'fine_tuning.svg'
set encoding utf8
set border lw 1 lc rgb '#555555'
set grid lc rgb '#dddddd' lw 1
set key noopaque
set style line 1 lc rgb '#1f77b4' lw 2.5
set style line 2 lc rgb '#d62728' lw 2.5
set style line 3 lc rgb '#2ca02c' lw 2.5
set style line 4 lc rgb '#9467bd' lw 2.5
set style line 5 lc rgb '#ff7f0e' lw 2.5
set style line 6 lc rgb '#8c564b' lw 2.5
set palette defined (0 '#2166ac', 0.5 '#f7f7f7', 1 '#b2182b')
$r20 << EOD
25 1.91696
50 1.72303
75 1.6273
100 1.58153
EOD
$r21 << EOD
25 1.47809
50 1.46628
75 1.45406
100 1.44169
EOD
$r22 << EOD
25 1.886
50 1.68
75 1.58502
100 1.52277
EOD
$r23 << EOD
25 1.45153
50 1.42708
75 1.43041
100 1.4272
EOD
set title 'Fine-tuning at 4x: held-out loss at the fine-tune length'
set xlabel 'step'
set ylabel 'nats per character'
set key outside right
plot $r20 using 1:2 with lines lw 2 dt 1 lc rgb '#1f77b4' title 'rope-pi-ft-s1', $r21 using 1:2 with lines lw 2 dt 1 lc rgb '#d62728' title 'rope-yarn-ft-s1', $r22 using 1:2 with lines lw 2 dt 2 lc rgb '#1f77b4' title 'rope-pi-ft-s2', $r23 using 1:2 with lines lw 2 dt 2 lc rgb '#d62728' title 'rope-yarn-ft-s2'
unset output
