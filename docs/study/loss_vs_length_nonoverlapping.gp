set terminal pngcairo enhanced size 1900,1200 font 'DejaVu Sans,11'
set output 'loss_vs_length_nonoverlapping.png'
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
1 1.89057 1.87498 1.90615
2 2.47489 2.45464 2.49513
4 2.77735 2.75914 2.79555
8 2.91257 2.89491 2.93024
16 2.91443 2.91092 2.91794
EOD
$a1 << EOD
1 1.63401 1.61691 1.65111
2 2.55709 2.51531 2.59888
4 2.999 2.98902 3.00897
8 3.21257 3.16323 3.26191
16 3.28949 3.18967 3.3893
EOD
$a2 << EOD
1 1.48381 1.47003 1.49759
2 1.82425 1.81167 1.83683
4 2.61514 2.53519 2.69509
8 3.28754 3.15494 3.42014
16 3.7278 3.5383 3.91729
EOD
$a3 << EOD
1 1.57028 1.56694 1.57362
2 1.56179 1.55746 1.56612
4 1.55763 1.55288 1.56237
8 1.55704 1.55144 1.56265
16 1.5568 1.55072 1.56288
EOD
$a4 << EOD
1 2.18908 2.18724 2.19093
2 2.25623 2.25273 2.25973
4 2.32095 2.32014 2.32176
8 2.37033 2.36769 2.37296
16 2.40058 2.39882 2.40234
EOD
$a5 << EOD
1 1.78931 1.77532 1.8033
2 1.88066 1.86801 1.8933
4 2.07571 2.07494 2.07649
8 2.28877 2.279 2.29854
16 2.44314 2.43558 2.4507
EOD
$a6 << EOD
1 1.4795 1.47079 1.48821
2 1.47172 1.46439 1.47905
4 1.4719 1.46599 1.47782
8 1.48059 1.47862 1.48256
16 1.50336 1.501 1.50572
EOD
$a7 << EOD
1 1.52319 1.50221 1.54417
2 1.51466 1.49266 1.53667
4 1.51084 1.48836 1.53333
8 1.51086 1.48815 1.53356
16 1.51237 1.4892 1.53554
EOD
$a8 << EOD
1 1.49978 1.49925 1.50031
2 1.50247 1.50152 1.50342
4 1.56649 1.55678 1.57621
8 1.7072 1.67636 1.73805
16 1.89325 1.83582 1.95067
EOD
$a9 << EOD
1 1.58233 1.5738 1.59087
2 1.62827 1.62202 1.63452
4 1.79042 1.78523 1.7956
8 2.11088 2.11018 2.11159
16 2.49205 2.49086 2.49324
EOD
$a10 << EOD
1 3.56066 3.51503 3.6063
2 3.58039 3.53756 3.62323
4 3.59283 3.55065 3.63502
8 3.67547 3.6573 3.69363
16 3.8979 3.76687 4.02894
EOD
$a11 << EOD
1 1.52802 1.51297 1.54306
2 1.52827 1.51287 1.54367
4 1.92819 1.89051 1.96586
8 2.7579 2.70414 2.81165
16 3.38866 3.27288 3.50443
EOD
$a12 << EOD
1 1.48381 1.47003 1.49759
2 1.56271 1.56042 1.56501
4 1.92819 1.89051 1.96586
8 2.56569 2.52112 2.61026
16 3.06199 2.95026 3.17372
EOD
$a13 << EOD
1 1.64814 1.64083 1.65545
2 1.68007 1.67468 1.68547
4 1.70009 1.69451 1.70566
8 2.25097 2.21056 2.29138
16 3.03338 2.95844 3.10832
EOD
$a14 << EOD
1 1.60678 1.58108 1.63248
2 1.59604 1.56892 1.62316
4 1.59116 1.56283 1.6195
8 2.24522 2.15908 2.33136
16 2.98036 2.73159 3.22914
EOD
$a15 << EOD
1 1.48831 1.47546 1.50117
2 1.47829 1.46494 1.49163
4 1.47348 1.4601 1.48687
8 2.00463 1.99871 2.01056
16 2.85876 2.72676 2.99076
EOD
$a16 << EOD
1 1.48381 1.47003 1.49759
2 1.4771 1.46263 1.49156
4 1.47685 1.46483 1.48887
8 1.48209 1.47133 1.49284
16 1.49545 1.48391 1.50699
EOD
$a17 << EOD
1 1.4875 1.47446 1.50054
2 1.48696 1.47548 1.49845
4 1.49366 1.48661 1.5007
8 1.50928 1.50489 1.51367
16 1.53821 1.53814 1.53828
EOD
$a18 << EOD
1 1.48381 1.47003 1.49759
2 1.47472 1.4607 1.48874
4 1.47035 1.45648 1.48422
8 1.46866 1.45478 1.48253
16 1.46792 1.45397 1.48186
EOD
$a19 << EOD
1 1.48381 1.47003 1.49759
2 1.51637 1.49722 1.53552
4 1.55325 1.52351 1.583
8 1.64358 1.60461 1.68255
16 1.65738 1.61116 1.70359
EOD
set multiplot layout 2,2 title 'Held-out loss against evaluation length (non-overlapping windows; trained at 128 characters, mean of seeds, bars: seed range)'
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
set output 'loss_vs_length_nonoverlapping.svg'
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
1 1.89057 1.87498 1.90615
2 2.47489 2.45464 2.49513
4 2.77735 2.75914 2.79555
8 2.91257 2.89491 2.93024
16 2.91443 2.91092 2.91794
EOD
$a1 << EOD
1 1.63401 1.61691 1.65111
2 2.55709 2.51531 2.59888
4 2.999 2.98902 3.00897
8 3.21257 3.16323 3.26191
16 3.28949 3.18967 3.3893
EOD
$a2 << EOD
1 1.48381 1.47003 1.49759
2 1.82425 1.81167 1.83683
4 2.61514 2.53519 2.69509
8 3.28754 3.15494 3.42014
16 3.7278 3.5383 3.91729
EOD
$a3 << EOD
1 1.57028 1.56694 1.57362
2 1.56179 1.55746 1.56612
4 1.55763 1.55288 1.56237
8 1.55704 1.55144 1.56265
16 1.5568 1.55072 1.56288
EOD
$a4 << EOD
1 2.18908 2.18724 2.19093
2 2.25623 2.25273 2.25973
4 2.32095 2.32014 2.32176
8 2.37033 2.36769 2.37296
16 2.40058 2.39882 2.40234
EOD
$a5 << EOD
1 1.78931 1.77532 1.8033
2 1.88066 1.86801 1.8933
4 2.07571 2.07494 2.07649
8 2.28877 2.279 2.29854
16 2.44314 2.43558 2.4507
EOD
$a6 << EOD
1 1.4795 1.47079 1.48821
2 1.47172 1.46439 1.47905
4 1.4719 1.46599 1.47782
8 1.48059 1.47862 1.48256
16 1.50336 1.501 1.50572
EOD
$a7 << EOD
1 1.52319 1.50221 1.54417
2 1.51466 1.49266 1.53667
4 1.51084 1.48836 1.53333
8 1.51086 1.48815 1.53356
16 1.51237 1.4892 1.53554
EOD
$a8 << EOD
1 1.49978 1.49925 1.50031
2 1.50247 1.50152 1.50342
4 1.56649 1.55678 1.57621
8 1.7072 1.67636 1.73805
16 1.89325 1.83582 1.95067
EOD
$a9 << EOD
1 1.58233 1.5738 1.59087
2 1.62827 1.62202 1.63452
4 1.79042 1.78523 1.7956
8 2.11088 2.11018 2.11159
16 2.49205 2.49086 2.49324
EOD
$a10 << EOD
1 3.56066 3.51503 3.6063
2 3.58039 3.53756 3.62323
4 3.59283 3.55065 3.63502
8 3.67547 3.6573 3.69363
16 3.8979 3.76687 4.02894
EOD
$a11 << EOD
1 1.52802 1.51297 1.54306
2 1.52827 1.51287 1.54367
4 1.92819 1.89051 1.96586
8 2.7579 2.70414 2.81165
16 3.38866 3.27288 3.50443
EOD
$a12 << EOD
1 1.48381 1.47003 1.49759
2 1.56271 1.56042 1.56501
4 1.92819 1.89051 1.96586
8 2.56569 2.52112 2.61026
16 3.06199 2.95026 3.17372
EOD
$a13 << EOD
1 1.64814 1.64083 1.65545
2 1.68007 1.67468 1.68547
4 1.70009 1.69451 1.70566
8 2.25097 2.21056 2.29138
16 3.03338 2.95844 3.10832
EOD
$a14 << EOD
1 1.60678 1.58108 1.63248
2 1.59604 1.56892 1.62316
4 1.59116 1.56283 1.6195
8 2.24522 2.15908 2.33136
16 2.98036 2.73159 3.22914
EOD
$a15 << EOD
1 1.48831 1.47546 1.50117
2 1.47829 1.46494 1.49163
4 1.47348 1.4601 1.48687
8 2.00463 1.99871 2.01056
16 2.85876 2.72676 2.99076
EOD
$a16 << EOD
1 1.48381 1.47003 1.49759
2 1.4771 1.46263 1.49156
4 1.47685 1.46483 1.48887
8 1.48209 1.47133 1.49284
16 1.49545 1.48391 1.50699
EOD
$a17 << EOD
1 1.4875 1.47446 1.50054
2 1.48696 1.47548 1.49845
4 1.49366 1.48661 1.5007
8 1.50928 1.50489 1.51367
16 1.53821 1.53814 1.53828
EOD
$a18 << EOD
1 1.48381 1.47003 1.49759
2 1.47472 1.4607 1.48874
4 1.47035 1.45648 1.48422
8 1.46866 1.45478 1.48253
16 1.46792 1.45397 1.48186
EOD
$a19 << EOD
1 1.48381 1.47003 1.49759
2 1.51637 1.49722 1.53552
4 1.55325 1.52351 1.583
8 1.64358 1.60461 1.68255
16 1.65738 1.61116 1.70359
EOD
set multiplot layout 2,2 title 'Held-out loss against evaluation length (non-overlapping windows; trained at 128 characters, mean of seeds, bars: seed range)'
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
