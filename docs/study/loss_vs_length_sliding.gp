set terminal pngcairo enhanced size 1900,1200 font 'DejaVu Sans,11'
set output 'loss_vs_length_sliding.png'
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
$a0 << EOD
1 1.88975 1.87175 1.90775
2 3.0725 3.06528 3.07973
4 3.0888 3.08291 3.09468
8 3.10659 3.10444 3.10874
16 3.08158 3.08098 3.08219
EOD
$a1 << EOD
1 1.61849 1.59864 1.63834
2 3.49191 3.41442 3.5694
4 3.34274 3.33434 3.35114
8 3.4239 3.31796 3.52984
16 3.45008 3.38804 3.51213
EOD
$a2 << EOD
1 1.46626 1.45218 1.48035
2 2.63367 2.58464 2.6827
4 3.56467 3.42707 3.70227
8 3.97717 3.78189 4.17245
16 4.15163 3.88952 4.41374
EOD
$a3 << EOD
1 1.55271 1.54802 1.55741
2 1.55445 1.54858 1.56032
4 1.55583 1.54949 1.56216
8 1.55632 1.54963 1.56301
16 1.55643 1.54967 1.56318
EOD
$a4 << EOD
1 2.26323 2.25905 2.26741
2 2.33658 2.33047 2.34269
4 2.39065 2.38878 2.39253
8 2.41576 2.41226 2.41925
16 2.43403 2.42344 2.44461
EOD
$a5 << EOD
1 1.82213 1.80458 1.83967
2 2.04602 2.03544 2.0566
4 2.32719 2.31779 2.33659
8 2.49793 2.47539 2.52048
16 2.59547 2.57519 2.61576
EOD
$a6 << EOD
1 1.46152 1.45364 1.4694
2 1.46651 1.46076 1.47227
4 1.47632 1.47408 1.47856
8 1.49597 1.49314 1.4988
16 1.53178 1.52277 1.54078
EOD
$a7 << EOD
1 1.50562 1.48254 1.52871
2 1.50763 1.48439 1.53086
4 1.51001 1.48657 1.53345
8 1.51195 1.48834 1.53557
16 1.51356 1.48983 1.53729
EOD
$a8 << EOD
1 1.48142 1.48131 1.48153
2 1.52358 1.52147 1.52569
4 1.67947 1.65415 1.70478
8 1.8933 1.83421 1.95239
16 2.10807 2.03045 2.18569
EOD
$a9 << EOD
1 1.56768 1.5621 1.57327
2 1.62662 1.61929 1.63394
4 1.80156 1.79781 1.80531
8 2.11694 2.11147 2.1224
16 2.49565 2.49364 2.49765
EOD
$a10 << EOD
1 3.60513 3.56132 3.64894
2 3.60283 3.56154 3.64413
4 3.60653 3.56138 3.65168
8 3.8131 3.80874 3.81747
16 4.12685 3.8918 4.3619
EOD
$a11 << EOD
1 1.52665 1.51246 1.54083
2 1.53478 1.52038 1.54918
4 2.58013 2.56851 2.59175
8 3.66809 3.57058 3.7656
16 3.99654 3.82557 4.1675
EOD
$a12 << EOD
1 1.46626 1.45218 1.48035
2 1.76992 1.73384 1.806
4 2.58013 2.56851 2.59175
8 3.688 3.4768 3.8992
16 3.85487 3.64261 4.06713
EOD
$a13 << EOD
1 1.70867 1.7083 1.70904
2 1.71742 1.7151 1.71973
4 1.72126 1.7187 1.72382
8 3.22836 3.16125 3.29547
16 3.81531 3.65978 3.97083
EOD
$a14 << EOD
1 1.58847 1.56018 1.61676
2 1.58841 1.55996 1.61687
4 1.58891 1.55974 1.61808
8 3.46597 3.24412 3.68783
16 3.63798 3.23496 4.04101
EOD
$a15 << EOD
1 1.46966 1.45644 1.48288
2 1.46973 1.45615 1.48331
4 1.47022 1.45618 1.48426
8 2.99004 2.97258 3.00751
16 3.73861 3.53592 3.9413
EOD
$a16 << EOD
1 1.46626 1.45218 1.48035
2 1.47109 1.45703 1.48515
4 1.48099 1.46955 1.49244
8 1.4948 1.48503 1.50457
16 1.52194 1.51411 1.52976
EOD
$a17 << EOD
1 1.47831 1.46815 1.48848
2 1.49175 1.48537 1.49813
4 1.5083 1.50385 1.51276
8 1.53185 1.53111 1.53259
16 1.576 1.56892 1.58307
EOD
$a18 << EOD
1 1.46626 1.45218 1.48035
2 1.46723 1.4531 1.48136
4 1.46725 1.45337 1.48113
8 1.4675 1.45352 1.48149
16 1.46719 1.45306 1.48132
EOD
$a19 << EOD
1 1.46626 1.45218 1.48035
2 1.55615 1.52152 1.59078
4 1.48946 1.47947 1.49945
8 1.71857 1.67336 1.76377
16 1.73453 1.67415 1.79491
EOD
set multiplot layout 2,2 title 'Held-out loss against evaluation length (sliding window, last quarter scored; trained at 128 characters, mean of seeds, bars: seed range)'
set xlabel 'evaluation length / training length'
set ylabel 'nats per character'
set logscale x 2
set xrange [0.8:20]
set key top left reverse Left samplen 3
set title 'Position methods'
set offsets 0, 0, 1, 0
plot $a0 using 1:2:3:4 with yerrorlines lw 2 dt 1 pt 7 ps 0.6 lc rgb '#1f77b4' title 'Learned absolute', $a1 using 1:2:3:4 with yerrorlines lw 2 dt 1 pt 7 ps 0.6 lc rgb '#d62728' title 'Sinusoidal', $a2 using 1:2:3:4 with yerrorlines lw 2 dt 1 pt 7 ps 0.6 lc rgb '#2ca02c' title 'RoPE', $a3 using 1:2:3:4 with yerrorlines lw 2 dt 1 pt 7 ps 0.6 lc rgb '#9467bd' title 'ALiBi', $a4 using 1:2:3:4 with yerrorlines lw 2 dt 1 pt 7 ps 0.6 lc rgb '#ff7f0e' title 'NoPE (causal mask only)'
set title 'Research schemes (RoPE and ALiBi for reference)'
set offsets 0, 0, 1.6, 0
plot $a2 using 1:2:3:4 with yerrorlines lw 2 dt 1 pt 7 ps 0.6 lc rgb '#2ca02c' title 'RoPE', $a3 using 1:2:3:4 with yerrorlines lw 2 dt 1 pt 7 ps 0.6 lc rgb '#9467bd' title 'ALiBi', $a5 using 1:2:3:4 with yerrorlines lw 2 dt 1 pt 7 ps 0.6 lc rgb '#8c564b' title 'T5 relative bias', $a6 using 1:2:3:4 with yerrorlines lw 2 dt 1 pt 7 ps 0.6 lc rgb '#e377c2' title 'xPos', $a7 using 1:2:3:4 with yerrorlines lw 2 dt 1 pt 7 ps 0.6 lc rgb '#7f7f7f' title 'KERPLE (log)', $a8 using 1:2:3:4 with yerrorlines lw 2 dt 1 pt 7 ps 0.6 lc rgb '#bcbd22' title 'FIRE (composed attention)', $a9 using 1:2:3:4 with yerrorlines lw 2 dt 1 pt 7 ps 0.6 lc rgb '#17becf' title 'RoPE, randomized positions'
set title 'RoPE stretched without and with fine-tuning'
set offsets 0, 0, 1.6, 0
plot $a2 using 1:2:3:4 with yerrorlines lw 2 dt 1 pt 7 ps 0.6 lc rgb '#2ca02c' title 'RoPE', $a10 using 1:2:3:4 with yerrorlines lw 2 dt 1 pt 7 ps 0.6 lc rgb '#000000' title 'RoPE + PI x4 (zero-shot)', $a11 using 1:2:3:4 with yerrorlines lw 2 dt 1 pt 7 ps 0.6 lc rgb '#006400' title 'RoPE + NTK-aware x4 (zero-shot)', $a12 using 1:2:3:4 with yerrorlines lw 2 dt 1 pt 7 ps 0.6 lc rgb '#ff1493' title 'RoPE + dynamic NTK (zero-shot)', $a13 using 1:2:3:4 with yerrorlines lw 2 dt 1 pt 7 ps 0.6 lc rgb '#00008b' title 'RoPE + YaRN x4 (zero-shot)', $a14 using 1:2:3:4 with yerrorlines lw 2 dt 2 pt 7 ps 0.6 lc rgb '#b8860b' title 'RoPE + PI x4, fine-tuned at 4x', $a15 using 1:2:3:4 with yerrorlines lw 2 dt 2 pt 7 ps 0.6 lc rgb '#4b0082' title 'RoPE + YaRN x4, fine-tuned at 4x'
set title 'RoPE read through a cache (zero-shot)'
set offsets 0, 0, 1.6, 0
plot $a2 using 1:2:3:4 with yerrorlines lw 2 dt 1 pt 7 ps 0.6 lc rgb '#2ca02c' title 'RoPE', $a16 using 1:2:3:4 with yerrorlines lw 2 dt 1 pt 7 ps 0.6 lc rgb '#ff4500' title 'RoPE + Self-Extend (zero-shot)', $a17 using 1:2:3:4 with yerrorlines lw 2 dt 1 pt 7 ps 0.6 lc rgb '#2f4f4f' title 'RoPE + dual chunk attention (zero-shot)', $a18 using 1:2:3:4 with yerrorlines lw 2 dt 1 pt 7 ps 0.6 lc rgb '#9acd32' title 'RoPE + sinks, cache positions (zero-shot)', $a19 using 1:2:3:4 with yerrorlines lw 2 dt 1 pt 7 ps 0.6 lc rgb '#dc143c' title 'RoPE + sinks, text positions (zero-shot)'
unset multiplot
unset output
set terminal svg enhanced dynamic background rgb 'white' size 1900,1200 font 'DejaVu Sans,11'
set output 'loss_vs_length_sliding.svg'
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
$a0 << EOD
1 1.88975 1.87175 1.90775
2 3.0725 3.06528 3.07973
4 3.0888 3.08291 3.09468
8 3.10659 3.10444 3.10874
16 3.08158 3.08098 3.08219
EOD
$a1 << EOD
1 1.61849 1.59864 1.63834
2 3.49191 3.41442 3.5694
4 3.34274 3.33434 3.35114
8 3.4239 3.31796 3.52984
16 3.45008 3.38804 3.51213
EOD
$a2 << EOD
1 1.46626 1.45218 1.48035
2 2.63367 2.58464 2.6827
4 3.56467 3.42707 3.70227
8 3.97717 3.78189 4.17245
16 4.15163 3.88952 4.41374
EOD
$a3 << EOD
1 1.55271 1.54802 1.55741
2 1.55445 1.54858 1.56032
4 1.55583 1.54949 1.56216
8 1.55632 1.54963 1.56301
16 1.55643 1.54967 1.56318
EOD
$a4 << EOD
1 2.26323 2.25905 2.26741
2 2.33658 2.33047 2.34269
4 2.39065 2.38878 2.39253
8 2.41576 2.41226 2.41925
16 2.43403 2.42344 2.44461
EOD
$a5 << EOD
1 1.82213 1.80458 1.83967
2 2.04602 2.03544 2.0566
4 2.32719 2.31779 2.33659
8 2.49793 2.47539 2.52048
16 2.59547 2.57519 2.61576
EOD
$a6 << EOD
1 1.46152 1.45364 1.4694
2 1.46651 1.46076 1.47227
4 1.47632 1.47408 1.47856
8 1.49597 1.49314 1.4988
16 1.53178 1.52277 1.54078
EOD
$a7 << EOD
1 1.50562 1.48254 1.52871
2 1.50763 1.48439 1.53086
4 1.51001 1.48657 1.53345
8 1.51195 1.48834 1.53557
16 1.51356 1.48983 1.53729
EOD
$a8 << EOD
1 1.48142 1.48131 1.48153
2 1.52358 1.52147 1.52569
4 1.67947 1.65415 1.70478
8 1.8933 1.83421 1.95239
16 2.10807 2.03045 2.18569
EOD
$a9 << EOD
1 1.56768 1.5621 1.57327
2 1.62662 1.61929 1.63394
4 1.80156 1.79781 1.80531
8 2.11694 2.11147 2.1224
16 2.49565 2.49364 2.49765
EOD
$a10 << EOD
1 3.60513 3.56132 3.64894
2 3.60283 3.56154 3.64413
4 3.60653 3.56138 3.65168
8 3.8131 3.80874 3.81747
16 4.12685 3.8918 4.3619
EOD
$a11 << EOD
1 1.52665 1.51246 1.54083
2 1.53478 1.52038 1.54918
4 2.58013 2.56851 2.59175
8 3.66809 3.57058 3.7656
16 3.99654 3.82557 4.1675
EOD
$a12 << EOD
1 1.46626 1.45218 1.48035
2 1.76992 1.73384 1.806
4 2.58013 2.56851 2.59175
8 3.688 3.4768 3.8992
16 3.85487 3.64261 4.06713
EOD
$a13 << EOD
1 1.70867 1.7083 1.70904
2 1.71742 1.7151 1.71973
4 1.72126 1.7187 1.72382
8 3.22836 3.16125 3.29547
16 3.81531 3.65978 3.97083
EOD
$a14 << EOD
1 1.58847 1.56018 1.61676
2 1.58841 1.55996 1.61687
4 1.58891 1.55974 1.61808
8 3.46597 3.24412 3.68783
16 3.63798 3.23496 4.04101
EOD
$a15 << EOD
1 1.46966 1.45644 1.48288
2 1.46973 1.45615 1.48331
4 1.47022 1.45618 1.48426
8 2.99004 2.97258 3.00751
16 3.73861 3.53592 3.9413
EOD
$a16 << EOD
1 1.46626 1.45218 1.48035
2 1.47109 1.45703 1.48515
4 1.48099 1.46955 1.49244
8 1.4948 1.48503 1.50457
16 1.52194 1.51411 1.52976
EOD
$a17 << EOD
1 1.47831 1.46815 1.48848
2 1.49175 1.48537 1.49813
4 1.5083 1.50385 1.51276
8 1.53185 1.53111 1.53259
16 1.576 1.56892 1.58307
EOD
$a18 << EOD
1 1.46626 1.45218 1.48035
2 1.46723 1.4531 1.48136
4 1.46725 1.45337 1.48113
8 1.4675 1.45352 1.48149
16 1.46719 1.45306 1.48132
EOD
$a19 << EOD
1 1.46626 1.45218 1.48035
2 1.55615 1.52152 1.59078
4 1.48946 1.47947 1.49945
8 1.71857 1.67336 1.76377
16 1.73453 1.67415 1.79491
EOD
set multiplot layout 2,2 title 'Held-out loss against evaluation length (sliding window, last quarter scored; trained at 128 characters, mean of seeds, bars: seed range)'
set xlabel 'evaluation length / training length'
set ylabel 'nats per character'
set logscale x 2
set xrange [0.8:20]
set key top left reverse Left samplen 3
set title 'Position methods'
set offsets 0, 0, 1, 0
plot $a0 using 1:2:3:4 with yerrorlines lw 2 dt 1 pt 7 ps 0.6 lc rgb '#1f77b4' title 'Learned absolute', $a1 using 1:2:3:4 with yerrorlines lw 2 dt 1 pt 7 ps 0.6 lc rgb '#d62728' title 'Sinusoidal', $a2 using 1:2:3:4 with yerrorlines lw 2 dt 1 pt 7 ps 0.6 lc rgb '#2ca02c' title 'RoPE', $a3 using 1:2:3:4 with yerrorlines lw 2 dt 1 pt 7 ps 0.6 lc rgb '#9467bd' title 'ALiBi', $a4 using 1:2:3:4 with yerrorlines lw 2 dt 1 pt 7 ps 0.6 lc rgb '#ff7f0e' title 'NoPE (causal mask only)'
set title 'Research schemes (RoPE and ALiBi for reference)'
set offsets 0, 0, 1.6, 0
plot $a2 using 1:2:3:4 with yerrorlines lw 2 dt 1 pt 7 ps 0.6 lc rgb '#2ca02c' title 'RoPE', $a3 using 1:2:3:4 with yerrorlines lw 2 dt 1 pt 7 ps 0.6 lc rgb '#9467bd' title 'ALiBi', $a5 using 1:2:3:4 with yerrorlines lw 2 dt 1 pt 7 ps 0.6 lc rgb '#8c564b' title 'T5 relative bias', $a6 using 1:2:3:4 with yerrorlines lw 2 dt 1 pt 7 ps 0.6 lc rgb '#e377c2' title 'xPos', $a7 using 1:2:3:4 with yerrorlines lw 2 dt 1 pt 7 ps 0.6 lc rgb '#7f7f7f' title 'KERPLE (log)', $a8 using 1:2:3:4 with yerrorlines lw 2 dt 1 pt 7 ps 0.6 lc rgb '#bcbd22' title 'FIRE (composed attention)', $a9 using 1:2:3:4 with yerrorlines lw 2 dt 1 pt 7 ps 0.6 lc rgb '#17becf' title 'RoPE, randomized positions'
set title 'RoPE stretched without and with fine-tuning'
set offsets 0, 0, 1.6, 0
plot $a2 using 1:2:3:4 with yerrorlines lw 2 dt 1 pt 7 ps 0.6 lc rgb '#2ca02c' title 'RoPE', $a10 using 1:2:3:4 with yerrorlines lw 2 dt 1 pt 7 ps 0.6 lc rgb '#000000' title 'RoPE + PI x4 (zero-shot)', $a11 using 1:2:3:4 with yerrorlines lw 2 dt 1 pt 7 ps 0.6 lc rgb '#006400' title 'RoPE + NTK-aware x4 (zero-shot)', $a12 using 1:2:3:4 with yerrorlines lw 2 dt 1 pt 7 ps 0.6 lc rgb '#ff1493' title 'RoPE + dynamic NTK (zero-shot)', $a13 using 1:2:3:4 with yerrorlines lw 2 dt 1 pt 7 ps 0.6 lc rgb '#00008b' title 'RoPE + YaRN x4 (zero-shot)', $a14 using 1:2:3:4 with yerrorlines lw 2 dt 2 pt 7 ps 0.6 lc rgb '#b8860b' title 'RoPE + PI x4, fine-tuned at 4x', $a15 using 1:2:3:4 with yerrorlines lw 2 dt 2 pt 7 ps 0.6 lc rgb '#4b0082' title 'RoPE + YaRN x4, fine-tuned at 4x'
set title 'RoPE read through a cache (zero-shot)'
set offsets 0, 0, 1.6, 0
plot $a2 using 1:2:3:4 with yerrorlines lw 2 dt 1 pt 7 ps 0.6 lc rgb '#2ca02c' title 'RoPE', $a16 using 1:2:3:4 with yerrorlines lw 2 dt 1 pt 7 ps 0.6 lc rgb '#ff4500' title 'RoPE + Self-Extend (zero-shot)', $a17 using 1:2:3:4 with yerrorlines lw 2 dt 1 pt 7 ps 0.6 lc rgb '#2f4f4f' title 'RoPE + dual chunk attention (zero-shot)', $a18 using 1:2:3:4 with yerrorlines lw 2 dt 1 pt 7 ps 0.6 lc rgb '#9acd32' title 'RoPE + sinks, cache positions (zero-shot)', $a19 using 1:2:3:4 with yerrorlines lw 2 dt 1 pt 7 ps 0.6 lc rgb '#dc143c' title 'RoPE + sinks, text positions (zero-shot)'
unset multiplot
unset output
