UPDATE employees e
JOIN departments d ON d.id = e.department_id
SET e.salary = LEAST(ROUND(e.salary * 1.10, 2), 9000.00)
WHERE d.name = 'Engineering'
  AND e.hired_on < '2020-01-01'
  AND e.salary < 9000.00;
